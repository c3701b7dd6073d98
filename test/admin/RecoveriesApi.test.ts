import { assert, layer } from "@effect/vitest"
import { Duration, Effect } from "effect"
import * as AdminAuthModule from "../../src/admin/AdminAuth.ts"
import { AdminAuth, Unauthenticated } from "../../src/admin/AdminAuth.ts"
import * as BulkRecovery from "../../src/webhooks/subscriptions/BulkRecovery.ts"
import { WebhookSubscriptions } from "../../src/webhooks/subscriptions/WebhookSubscriptions.ts"
import * as WebhookReceiver from "../../testkit/WebhookReceiver.ts"
import * as TestAdmin from "../support/TestAdmin.ts"
import * as TestWebhooks from "../support/TestWebhooks.ts"

const Live = TestWebhooks.layer({ retrySteps: [Duration.hours(1)] })

/** A host's auth: the `x-principal` header names the caller; `x-operator` makes it the operator. */
const hostAuth = AdminAuth.make((request) => {
  if (request.headers["x-operator"] !== undefined) return Effect.succeed(AdminAuthModule.operator)
  const who = request.headers["x-principal"]
  return who === undefined
    ? Effect.fail(new Unauthenticated({ detail: "no x-principal header" }))
    : Effect.succeed(AdminAuthModule.principal(who))
})

layer(Live, { excludeTestServices: true })("the admin API's recoveries", (it) => {
  it.effect(
    "BulkRecoverOverHttp: 202 with the job's id, progress polled until done, paused and resumed; a bad filter is a 400 naming the field; a principal sees only its own",
    () =>
      Effect.gen(function* () {
        const webhooks = yield* WebhookSubscriptions
        const signals = yield* TestWebhooks.signals
        let healthy = false
        const receiver = yield* WebhookReceiver.start(() => ({ status: healthy ? 200 : 500 }))
        const base = yield* TestAdmin.serve(hostAuth)
        const operator = TestAdmin.client(base, { headers: { "x-operator": "1" } })
        const carol = TestAdmin.client(base, { headers: { "x-principal": "carol" } })
        const dave = TestAdmin.client(base, { headers: { "x-principal": "dave" } })
        const sub = yield* TestWebhooks.subscribe("carol", receiver.url("/c"), ["c-space"])
        for (const i of [0, 1, 2]) yield* TestWebhooks.append("c-space", { i })
        yield* TestWebhooks.round()
        // Nothing runs yet: disabling ends the three deliveries (dead, `disabled:manual`).
        yield* webhooks.disable(sub.id)
        yield* webhooks.enable(sub.id)
        // A round reads past the disable's own `bothy.subscription.disabled` event.
        yield* TestWebhooks.round()

        const inverted = yield* carol.post("/v1/recoveries", {
          since: "2026-12-02T00:00:00Z",
          until: "2026-12-01T00:00:00Z",
        })
        assert.strictEqual(inverted.status, 400, JSON.stringify(inverted.body))
        assert.deepStrictEqual(
          [inverted.body._tag, inverted.body.field, inverted.body.reason],
          ["InvalidRecoveryFilter", "until", "InvertedRange"],
        )
        const broad = yield* operator.post("/v1/recoveries", { states: ["failed"] })
        assert.deepStrictEqual([broad.status, broad.body.reason], [400, "TooBroad"])
        const another = yield* carol.post("/v1/recoveries", { owner: "dave" })
        assert.strictEqual(another.status, 422, "a principal names no other owner")

        // Carol's recovery (her owner implied), paused before any worker runs.
        const accepted = yield* carol.post("/v1/recoveries", { states: ["failed"] })
        assert.strictEqual(accepted.status, 202, JSON.stringify(accepted.body))
        assert.match(accepted.body.job, /^\d+$/)
        assert.deepStrictEqual([accepted.body.total, accepted.body.replay], [3, null])
        const job: string = accepted.body.job
        assert.strictEqual((yield* dave.get(`/v1/recoveries/${job}`)).status, 404, "another's is not found")
        const paused = yield* carol.post(`/v1/recoveries/${job}/pause`)
        assert.deepStrictEqual([paused.status, paused.body.state, paused.body.filter.owner], [200, "paused", "carol"])

        healthy = true
        yield* TestWebhooks.startDrainers(signals, { kinds: [yield* BulkRecovery.make] })
        // The worker takes the job and ends it at once, cancelled as paused: nothing is sent.
        yield* signals.until(
          Effect.map(
            operator.get(`/v1/jobs?kind=${BulkRecovery.kind}&state=cancelled`),
            (r) => r.body.items.length === 1,
          ),
        )
        const stillPaused = yield* carol.get(`/v1/recoveries/${job}`)
        assert.deepStrictEqual([stillPaused.body.state, stillPaused.body.examined], ["paused", 0])
        assert.strictEqual(receiver.log.length, 0)

        const resumed = yield* carol.post(`/v1/recoveries/${job}/resume`)
        assert.deepStrictEqual([resumed.status, resumed.body.state], [200, "running"])
        yield* signals.until(Effect.map(carol.get(`/v1/recoveries/${job}`), (r) => r.body.state === "done"))
        const finished = yield* carol.get(`/v1/recoveries/${job}`)
        assert.deepStrictEqual(
          [finished.body.total, finished.body.examined, finished.body.resent, finished.body.skipped],
          [3, 3, 3, 0],
        )
        assert.match(finished.body.finishedAt, /^\d{4}-/)
        yield* signals.until(Effect.sync(() => receiver.log.length === 3))
        assert.deepStrictEqual(
          receiver.log.map((r) => TestWebhooks.envelope(r).data.i),
          [0, 1, 2],
        )
      }),
  )
})
