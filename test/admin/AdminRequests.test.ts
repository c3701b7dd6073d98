import { request as httpRequest } from "node:http"
import { assert, layer } from "@effect/vitest"
import { ConfigProvider, Effect, Layer, Logger, Option, Redacted } from "effect"
import { SqlClient } from "effect/sql"
import { AdminAuth } from "../../src/admin/AdminAuth.ts"
import * as AdminServer from "../../src/admin/AdminServer.ts"
import { PushConfig } from "../../src/push/PushConfig.ts"
import * as WebhookReceiver from "../../testkit/WebhookReceiver.ts"
import * as NodeProcess from "../support/NodeProcess.ts"
import * as TestAdmin from "../support/TestAdmin.ts"
import { TestDatabase } from "../support/TestDatabase.ts"
import * as TestPush from "../support/TestPush.ts"
import * as TestWebhooks from "../support/TestWebhooks.ts"
import * as WorkerProcess from "../support/WorkerProcess.ts"

const Live = TestWebhooks.layer().pipe(Layer.provideMerge(PushConfig.layerWith(TestPush.settings())))

const token = "admin-requests-token-0123456789"
const operator = AdminAuth.token(Option.some(Redacted.make(token)))

/** One past the largest int8. */
const pastInt8 = "9223372036854775808"

/** Every line logged while `effect` runs (and by the fibers it starts, the server's included). */
const capturing = <A, E, R>(lines: Array<string>, effect: Effect.Effect<A, E, R>) =>
  effect.pipe(
    Effect.provide(
      Logger.layer(
        [
          Logger.make(({ message }) => {
            lines.push((Array.isArray(message) ? message : [message]).map(String).join(" "))
          }),
        ],
        { mergeWithExisting: true },
      ),
    ),
  )

/**
 * A raw request that declares `declared` bytes (or none: chunked) and sends only `sent` of them,
 * then waits for the answer: a server that reads the whole body before answering never answers.
 */
const partialUpload = (base: string, path: string, declared: number | undefined, sent: number) =>
  Effect.callback<{ readonly status: number; readonly body: string }, Error>((resume) => {
    const url = new URL(path, base)
    const req = httpRequest(
      {
        host: url.hostname,
        port: url.port,
        path: url.pathname,
        method: "POST",
        headers: {
          authorization: `Bearer ${token}`,
          "content-type": "application/json",
          ...(declared === undefined ? {} : { "content-length": String(declared) }),
        },
      },
      (res) => {
        let body = ""
        res.setEncoding("utf8")
        res.on("data", (chunk: string) => {
          body += chunk
        })
        res.on("end", () => {
          req.destroy()
          resume(Effect.succeed({ status: res.statusCode ?? 0, body }))
        })
      },
    )
    req.on("error", (e) => resume(Effect.fail(e)))
    // A JSON string that never closes: what arrives is a prefix of a valid body.
    const chunk = Buffer.alloc(16 * 1024, "a")
    req.write('{"url":"')
    for (let written = 8; written < sent; written += chunk.length) req.write(chunk)
    // The body is never finished: only an early answer ends this.
  }).pipe(
    Effect.timeoutOrElse({
      duration: "20 seconds",
      orElse: () => Effect.fail(new Error(`no answer to a partial upload to ${path}`)),
    }),
  )

layer(Live, { excludeTestServices: true })("the admin API's requests", (it) => {
  it.effect(
    "AdminRejectsUnknownFields: a body field the endpoint does not declare (eventType for eventTypes, a nested key, a body where none is taken) is a 400 naming every unknown field, and nothing changes",
    () =>
      Effect.gen(function* () {
        const base = yield* TestAdmin.serve(operator)
        const api = TestAdmin.client(base, { token })
        const receiver = yield* WebhookReceiver.start(() => ({ status: 200 }))
        const before = (yield* api.get("/v1/subscriptions")).body.items.length

        // The operator's report: singular eventType used to subscribe to every type.
        const typo = yield* api.post("/v1/subscriptions", {
          owner: "ann",
          url: receiver.url("/a"),
          scope: ["s1"],
          eventType: ["order.created"],
        })
        assert.strictEqual(typo.status, 400, JSON.stringify(typo.body))
        assert.deepInclude(typo.body, { _tag: "InvalidRequest", field: "payload.eventType" })
        assert.include(typo.body.detail, "payload.eventType")
        const two = yield* api.post("/v1/subscriptions", {
          owner: "ann",
          url: receiver.url("/a"),
          scope: ["s1"],
          eventType: ["order.created"],
          ratelimit: 5,
        })
        assert.strictEqual(two.status, 400)
        assert.include(two.body.detail, "payload.eventType, payload.ratelimit")
        assert.strictEqual((yield* api.get("/v1/subscriptions")).body.items.length, before, "nothing was created")

        // PATCH with eventtypes used to answer 200 and change nothing.
        const created = yield* api.post("/v1/subscriptions", {
          owner: "ann",
          url: receiver.url("/a"),
          scope: ["s1"],
          eventTypes: ["order.created"],
        })
        assert.strictEqual(created.status, 201, JSON.stringify(created.body))
        const id: string = created.body.subscription.id
        const patch = yield* api.patch(`/v1/subscriptions/${id}`, { eventtypes: [], url: receiver.url("/b") })
        assert.strictEqual(patch.status, 400, JSON.stringify(patch.body))
        assert.deepInclude(patch.body, { _tag: "InvalidRequest", field: "payload.eventtypes" })
        assert.deepInclude((yield* api.get(`/v1/subscriptions/${id}`)).body, {
          url: receiver.url("/a"),
          eventTypes: ["order.created"],
        })

        // Every other body: recover, a registration (nested too), and a body posted where none is taken.
        const recover = yield* api.post(`/v1/subscriptions/${id}/recover`, { since: new Date().toISOString(), all: 1 })
        assert.strictEqual(recover.status, 400)
        assert.strictEqual(recover.body.field, "payload.all")
        const subscription = TestPush.unheardSubscription()
        const registration = yield* api.post("/v1/registrations", { principal: "ann", subscription, principle: "x" })
        assert.strictEqual(registration.status, 400)
        assert.strictEqual(registration.body.field, "payload.principle")
        const nested = yield* api.post("/v1/registrations", {
          principal: "ann",
          subscription: { ...subscription, keys: { ...subscription.keys, p265dh: "x" } },
        })
        assert.strictEqual(nested.status, 400)
        assert.strictEqual(nested.body.field, "payload.subscription.keys.p265dh")
        // A browser's own toJSON() (with expirationTime) is still welcome.
        const browser = yield* api.post("/v1/registrations", {
          principal: "ann",
          subscription: { ...subscription, expirationTime: null },
        })
        assert.strictEqual(browser.status, 201, JSON.stringify(browser.body))
        yield* api.post(`/v1/subscriptions/${id}/disable`)
        const misplaced = yield* api.post(`/v1/subscriptions/${id}/enable`, { fromSeq: "1" })
        assert.strictEqual(misplaced.status, 400, JSON.stringify(misplaced.body))
        assert.deepInclude(misplaced.body, { _tag: "InvalidRequest", field: "payload.fromSeq" })
        assert.strictEqual((yield* api.get(`/v1/subscriptions/${id}`)).body.state, "disabled", "not enabled")
        assert.strictEqual((yield* api.post(`/v1/subscriptions/${id}/disable`, null)).status, 200, "null is no field")
        assert.strictEqual((yield* api.post(`/v1/subscriptions/${id}/enable`, {})).status, 200, "{} is no field")
        const words = yield* TestAdmin.call(base, "POST", `/v1/subscriptions/${id}/rotate-secret`, {
          token,
          headers: { "content-type": "text/plain" },
          body: "rotate please",
        })
        assert.strictEqual(words.status, 400)
        assert.deepInclude(words.body, { _tag: "InvalidRequest", field: "payload" })
      }),
  )

  it.effect(
    "AdminIdsOutOfRangeAre4xx: an id that is malformed or past int8 is a 400 naming params.id in every route family (no SQL runs), a well-formed unknown one a 404; a defect is one log line with the request id and a JSON 500",
    () =>
      Effect.gen(function* () {
        const lines: Array<string> = []
        const base = yield* capturing(lines, TestAdmin.serve(operator))
        const api = TestAdmin.client(base, { token })

        // The operator's report, and the same for every family of ids.
        const refused = [
          yield* api.get(`/v1/deliveries/${pastInt8}`),
          yield* api.post(`/v1/deliveries/${pastInt8}/resend`),
          yield* api.post(`/v1/jobs/${pastInt8}/retry`),
          yield* api.post(`/v1/jobs/${pastInt8}/cancel`),
          yield* api.delete(`/v1/registrations/${pastInt8}`),
          yield* api.get("/v1/deliveries/abc"),
          yield* api.get("/v1/deliveries/0"),
          yield* api.post("/v1/jobs/-1/retry"),
          yield* api.delete("/v1/registrations/abc"),
          yield* api.get("/v1/subscriptions/abc"),
          yield* api.patch("/v1/subscriptions/abc", { url: "https://example.com/" }),
          yield* api.delete("/v1/subscriptions/abc"),
          yield* api.get("/v1/subscriptions/abc/deliveries"),
        ]
        for (const answer of refused) {
          assert.strictEqual(answer.status, 400, JSON.stringify(answer.body))
          assert.deepInclude(answer.body, { _tag: "InvalidRequest", field: "params.id" })
        }
        const before = yield* api.get(`/v1/jobs?before=${pastInt8}`)
        assert.strictEqual(before.status, 400)
        assert.deepInclude(before.body, { _tag: "InvalidRequest", field: "query.before" })
        // Well formed and in range, but nothing there: 404, as before.
        assert.strictEqual((yield* api.get("/v1/deliveries/9223372036854775807")).status, 404)
        assert.strictEqual((yield* api.post("/v1/jobs/9223372036854775807/retry")).status, 404)
        assert.strictEqual((yield* api.delete("/v1/registrations/9223372036854775807")).status, 404)
        assert.strictEqual((yield* api.get("/v1/subscriptions/0b9f6a2e-3c1d-4c5b-9a57-3f1f0f6c2d11")).status, 404)
        assert.deepStrictEqual(
          lines.filter((l) => l.includes("unexpected failure")),
          [],
        )

        // A defect (the table is gone for a moment): a JSON 500 with the request id, and one log line with it.
        const sql = yield* SqlClient.SqlClient
        const broken = yield* sql`ALTER TABLE webhook_subscriptions RENAME TO webhook_subscriptions_away`.pipe(
          Effect.andThen(
            Effect.all([
              api.get("/v1/subscriptions"),
              TestAdmin.call(base, "GET", "/v1/subscriptions", {
                token,
                headers: { "x-request-id": "proxy-req-42" },
              }),
            ]),
          ),
          Effect.ensuring(Effect.orDie(sql`ALTER TABLE webhook_subscriptions_away RENAME TO webhook_subscriptions`)),
        )
        for (const answer of broken) {
          assert.strictEqual(answer.status, 500)
          assert.strictEqual(answer.body._tag, "InternalError")
          assert.isString(answer.body.requestId)
          const logged = lines.filter((l) => l.includes(answer.body.requestId))
          assert.strictEqual(logged.length, 1, lines.join("\n"))
          assert.match(logged[0]!, /unexpected failure in subscriptions\.list \(GET \/v1\/subscriptions/)
          assert.notInclude(logged[0]!, "\n")
        }
        assert.strictEqual(broken[1]!.body.requestId, "proxy-req-42")
        const fine = yield* api.get("/v1/subscriptions")
        assert.strictEqual(fine.status, 200)
        assert.match(fine.headers.get("x-request-id") ?? "", /^[0-9a-f-]{36}$/)
      }),
  )

  it.effect(
    "AdminBadCursorIs400: a cursor or page size that is not one (after=garbage, before=garbage or past int8, fromSeq=garbage, limit=0) is a 400 naming the parameter, never an empty last page",
    () =>
      Effect.gen(function* () {
        const base = yield* TestAdmin.serve(operator)
        const api = TestAdmin.client(base, { token })
        const receiver = yield* WebhookReceiver.start(() => ({ status: 200 }))
        const created = yield* api.post("/v1/subscriptions", { owner: "cy", url: receiver.url("/c"), scope: ["c1"] })
        const id: string = created.body.subscription.id
        const cases: ReadonlyArray<readonly [string, string]> = [
          ["/v1/subscriptions?after=garbage", "query.after"],
          ["/v1/subscriptions?after=", "query.after"],
          [`/v1/subscriptions/${id}/deliveries?before=garbage`, "query.before"],
          [`/v1/subscriptions/${id}/deliveries?before=${pastInt8}`, "query.before"],
          [`/v1/subscriptions/${id}/deliveries?before=0`, "query.before"],
          ["/v1/jobs?before=garbage", "query.before"],
          ["/v1/jobs?before=1.5", "query.before"],
          ["/v1/subscriptions?limit=0", "query.limit"],
          ["/v1/jobs?limit=abc", "query.limit"],
          [`/v1/subscriptions/${id}/deliveries?limit=501`, "query.limit"],
        ]
        for (const [path, field] of cases) {
          const answer = yield* api.get(path)
          assert.strictEqual(answer.status, 400, `${path}: ${JSON.stringify(answer.body)}`)
          assert.deepInclude(answer.body, { _tag: "InvalidRequest", field }, path)
        }
        const fromSeq = yield* api.post(`/v1/subscriptions/${id}/enable?fromSeq=garbage`)
        assert.strictEqual(fromSeq.status, 400)
        assert.strictEqual(fromSeq.body.field, "query.fromSeq")
        // Real cursors still page.
        const page = yield* api.get(`/v1/subscriptions?after=${id.toUpperCase()}`)
        assert.strictEqual(page.status, 200)
        assert.strictEqual((yield* api.get("/v1/jobs?before=9223372036854775807&limit=1")).status, 200)
      }),
  )

  it.effect(
    "AdminBodyLimit: a body over admin.max_body_bytes is a 413 before it is read (declared or chunked), the server keeps serving, and the setting is validated with a typed error",
    () =>
      Effect.gen(function* () {
        const limit = 4096
        const base = yield* TestAdmin.serve(operator, { host: "127.0.0.1", port: 0 }, { maxBodyBytes: limit })
        const api = TestAdmin.client(base, { token })

        // 100 MB declared, 64 KiB sent: the answer comes without the rest.
        const declared = yield* partialUpload(base, "/v1/subscriptions", 100 * 1024 * 1024, 64 * 1024)
        assert.strictEqual(declared.status, 413, declared.body)
        assert.deepInclude(JSON.parse(declared.body), { _tag: "PayloadTooLarge", limit })
        // No content-length: cut off once past the limit.
        const chunked = yield* partialUpload(base, "/v1/subscriptions", undefined, 64 * 1024)
        assert.strictEqual(chunked.status, 413, chunked.body)
        assert.strictEqual(JSON.parse(chunked.body)._tag, "PayloadTooLarge")
        // A whole body over the limit, as a client sends it.
        const whole = yield* api.post("/v1/subscriptions", {
          owner: "dee",
          url: "https://example.com/",
          scope: Array.from({ length: 400 }, (_, i) => `space-${i}`),
        })
        assert.strictEqual(whole.status, 413)

        // Still serving, bodies under the limit included.
        assert.strictEqual((yield* api.get("/v1/subscriptions")).status, 200)
        const small = yield* api.post("/v1/subscriptions", { owner: "dee", url: "ftp://x.example", scope: ["d"] })
        assert.strictEqual(small.status, 422, "read and checked as before")

        // The setting: 1 MiB by default, a typed error naming it when it is no size.
        const read = (env: Record<string, string>) =>
          AdminServer.loadMaxBodyBytes.pipe(
            Effect.provide(ConfigProvider.layer(ConfigProvider.fromEnv({ env, preserveEmptyStrings: true }))),
          )
        assert.strictEqual(yield* read({}), 1_048_576)
        assert.strictEqual(yield* read({ BOTHY_ADMIN_MAX_BODY_BYTES: "65536" }), 65_536)
        for (const bad of ["1MB", "0", "", String(1024 ** 3)]) {
          const error = yield* Effect.flip(read({ BOTHY_ADMIN_MAX_BODY_BYTES: bad }))
          assert.strictEqual(error._tag, "InvalidConfig")
          assert.deepStrictEqual(error.keys, ["admin.max_body_bytes"])
          assert.include(error.message, "BOTHY_ADMIN_MAX_BODY_BYTES")
        }
        // The worker reads it with its other settings: a bad value stops the start with one line.
        const { url } = yield* TestDatabase
        const refused = yield* NodeProcess.run(NodeProcess.bothy, ["worker"], {
          DATABASE_URL: url,
          BOTHY_WEBHOOK_SECRET_KEY: WorkerProcess.rawKey(),
          BOTHY_ADMIN_ADDRESS: "off",
          BOTHY_METRICS_ADDRESS: "off",
          BOTHY_ADMIN_MAX_BODY_BYTES: "1MB",
        })
        assert.strictEqual(refused.code, 1)
        assert.strictEqual(
          refused.stderr.trim(),
          'bothy: invalid configuration: BOTHY_ADMIN_MAX_BODY_BYTES (admin.max_body_bytes) = "1MB": expected a whole number from 1024 to 67108864',
        )
      }),
  )
})
