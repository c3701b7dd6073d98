import { assert, layer } from "@effect/vitest"
import { Duration, Effect, Layer, Option, Redacted } from "effect"
import { Webhook } from "standardwebhooks"
import * as AdminAuthModule from "../../src/admin/AdminAuth.ts"
import { AdminAuth, Unauthenticated } from "../../src/admin/AdminAuth.ts"
import * as AdminServer from "../../src/admin/AdminServer.ts"
import * as PermissionGrants from "../../src/authz/PermissionGrants.ts"
import { webhookDeliver } from "../../src/authz/Permissions.ts"
import { Jobs } from "../../src/jobs/Jobs.ts"
import { PushConfig } from "../../src/push/PushConfig.ts"
import * as DeliveryResend from "../../src/webhooks/subscriptions/DeliveryResend.ts"
import * as WebhookReceiver from "../../testkit/WebhookReceiver.ts"
import * as TestAdmin from "../support/TestAdmin.ts"
import * as TestPush from "../support/TestPush.ts"
import * as TestWebhooks from "../support/TestWebhooks.ts"

// A failed request waits an hour for its retry: only the operator's recover sends it sooner.
const Live = TestWebhooks.layer({ retrySteps: [Duration.hours(1)] }).pipe(
  Layer.provideMerge(PushConfig.layerWith(TestPush.settings())),
)

const token = "admin-test-token-0123456789"

layer(Live, { excludeTestServices: true })("the admin API", (it) => {
  it.effect(
    "AdminApiManagesSubscriptions: over HTTP, subscriptions are created (secret once), listed a page at a time, read, updated, disabled, enabled, rotated and deleted; deliveries are listed, read with their attempts, re-sent and recovered by a job; registrations, consumers and jobs answer",
    () =>
      Effect.gen(function* () {
        const signals = yield* TestWebhooks.signals
        let answer = 503
        const receiver = yield* WebhookReceiver.start(() => ({ status: answer }))
        const base = yield* TestAdmin.serve(AdminAuth.token(Option.some(Redacted.make(token))))
        const api = TestAdmin.client(base, { token })
        yield* PermissionGrants.grant("alice", webhookDeliver, "space-1")
        const since = new Date(Date.now() - 60_000).toISOString()

        // Create: 201, the secret shown once, seqs as strings, the two options normalized.
        const created = yield* api.post("/v1/subscriptions", {
          owner: "alice",
          url: receiver.url("/first"),
          scope: ["space-1"],
          eventTypes: ["item.created"],
          rateLimit: 5,
          headers: { "X-Key": "k1" },
        })
        assert.strictEqual(created.status, 201, JSON.stringify(created.body))
        const secret: string = created.body.secret
        assert.match(secret, /^whsec_/)
        const sub = created.body.subscription
        assert.strictEqual(sub.owner, "alice")
        assert.strictEqual(typeof sub.startedSeq, "string")
        assert.strictEqual(sub.lastSequence, "0", "no delivery has taken a number yet")
        assert.notProperty(sub, "sequence")
        assert.strictEqual(sub.rateLimit, 5)
        assert.deepStrictEqual(sub.headers, { "x-key": "k1" })
        assert.notProperty(sub, "secret")
        const id: string = sub.id
        const other = yield* api.post("/v1/subscriptions", {
          owner: "bob",
          url: receiver.url("/other"),
          scope: ["space-2"],
        })
        assert.strictEqual(other.status, 201)

        // Bad input names the field (400); a refused target is 422; an unknown id 404.
        const badScope = yield* api.post("/v1/subscriptions", { owner: "alice", url: receiver.url("/x"), scope: [""] })
        assert.strictEqual(badScope.status, 400)
        assert.deepInclude(badScope.body, { _tag: "InvalidSubscription", field: "scope[0]" })
        const badShape = yield* api.post("/v1/subscriptions", { owner: "alice", url: 42, scope: ["space-1"] })
        assert.strictEqual(badShape.status, 400)
        assert.deepInclude(badShape.body, { _tag: "InvalidRequest", field: "payload.url" })
        const refused = yield* api.post("/v1/subscriptions", { owner: "alice", url: "ftp://x.example", scope: ["s"] })
        assert.strictEqual(refused.status, 422)
        assert.strictEqual(refused.body._tag, "UnsafeWebhookTarget")
        const missing = yield* api.get("/v1/subscriptions/0b9f6a2e-3c1d-4c5b-9a57-3f1f0f6c2d11")
        assert.strictEqual(missing.status, 404)
        assert.strictEqual(missing.body._tag, "SubscriptionNotFound")

        // List: a page at a time, by cursor; by owner.
        const page1 = yield* api.get("/v1/subscriptions?limit=1")
        assert.strictEqual(page1.status, 200)
        assert.strictEqual(page1.body.items.length, 1)
        assert.isString(page1.body.next)
        const page2 = yield* api.get(`/v1/subscriptions?limit=1&after=${page1.body.next}`)
        assert.strictEqual(page2.body.items.length, 1)
        assert.isNull(page2.body.next)
        assert.sameMembers(
          [...page1.body.items, ...page2.body.items].map((s: { id: string }) => s.id),
          [id, other.body.subscription.id],
        )
        const alices = yield* api.get("/v1/subscriptions?owner=alice")
        assert.deepStrictEqual(
          alices.body.items.map((s: { id: string }) => s.id),
          [id],
        )

        // Get and update.
        assert.strictEqual((yield* api.get(`/v1/subscriptions/${id}`)).body.url, receiver.url("/first"))
        const updated = yield* api.patch(`/v1/subscriptions/${id}`, {
          url: receiver.url("/hook"),
          eventTypes: [],
          rateLimit: null,
          headers: {},
        })
        assert.strictEqual(updated.status, 200, JSON.stringify(updated.body))
        assert.deepInclude(updated.body, { url: receiver.url("/hook"), rateLimit: null, headers: {}, eventTypes: [] })
        const badPatch = yield* api.patch(`/v1/subscriptions/${id}`, { headers: { "webhook-id": "x" } })
        assert.strictEqual(badPatch.status, 400)
        assert.strictEqual(badPatch.body.field, 'headers["webhook-id"]')

        // Two events fail at the receiver: the first is attempted and waits an hour, the second behind it.
        yield* TestWebhooks.startDrainers(signals, { kinds: [yield* DeliveryResend.make] })
        yield* TestWebhooks.append("space-1", { i: 1 })
        yield* TestWebhooks.append("space-1", { i: 2 })
        yield* TestWebhooks.round()
        yield* signals.until(Effect.map(TestWebhooks.deliveries(id), (ds) => ds.some((d) => d.attempts > 0)))
        const pending = yield* api.get(`/v1/subscriptions/${id}/deliveries?state=pending`)
        assert.strictEqual(pending.status, 200)
        assert.strictEqual(pending.body.items.length, 2)
        assert.isNull(pending.body.next)
        const [second, first] = pending.body.items
        assert.isString(first.id)
        assert.isTrue(BigInt(first.eventSeq) < BigInt(second.eventSeq))
        const shown = yield* api.get(`/v1/deliveries/${first.id}`)
        assert.strictEqual(shown.status, 200)
        assert.strictEqual(shown.body.delivery.attempts, 1)
        assert.deepInclude(shown.body.attempts[0], { number: 1, status: 503 })
        assert.strictEqual((yield* api.get("/v1/deliveries/999999")).status, 404)
        const byTime = yield* api.get(`/v1/subscriptions/${id}/deliveries?until=${encodeURIComponent(since)}`)
        assert.strictEqual(byTime.body.items.length, 0)

        // Disable: both end dead; re-sending one now is a conflict. Enable from the head, rotate.
        const disabled = yield* api.post(`/v1/subscriptions/${id}/disable`)
        assert.deepInclude(disabled.body, { state: "disabled", disabledCause: "manual" })
        const dead = yield* api.get(`/v1/subscriptions/${id}/deliveries?state=dead`)
        assert.deepStrictEqual(
          dead.body.items.map((d: { deadReason: string }) => d.deadReason),
          ["disabled:manual", "disabled:manual"],
        )
        const early = yield* api.post(`/v1/deliveries/${first.id}/resend`)
        assert.strictEqual(early.status, 409)
        assert.deepInclude(early.body, { _tag: "ResendRefused", reason: "SubscriptionDisabled" })
        const enabled = yield* api.post(`/v1/subscriptions/${id}/enable`)
        assert.strictEqual(enabled.status, 200)
        assert.deepInclude(enabled.body, { enabled: true, deliveries: 0 })
        assert.isString(enabled.body.after)
        const rotated = yield* api.post(`/v1/subscriptions/${id}/rotate-secret`)
        assert.match(rotated.body.secret, /^whsec_/)
        assert.notStrictEqual(rotated.body.secret, secret)

        // Recover: 202 with the job; the job sends both again, in order, now that the receiver accepts.
        // (The disable appended its operational event, so the consumer reads up to the new start first.)
        yield* TestWebhooks.round()
        answer = 200
        const recovery = yield* api.post(`/v1/subscriptions/${id}/recover`, { since })
        assert.strictEqual(recovery.status, 202, JSON.stringify(recovery.body))
        assert.match(recovery.body.job, /^\d+$/)
        yield* signals.until(
          Effect.map(TestWebhooks.deliveries(id), (ds) => ds.length === 2 && ds.every((d) => d.state === "delivered")),
        )
        const accepted = receiver.log.filter((r) => r.status === 200)
        assert.deepStrictEqual(
          accepted.map((r) => TestWebhooks.envelope(r).data.i),
          [1, 2],
        )
        // Signed with the new secret and the old one (its overlap).
        for (const s of [secret, rotated.body.secret]) {
          new Webhook(s).verify(accepted[0]!.body, accepted[0]!.headers as Record<string, string>)
        }

        // Re-send one delivered delivery: 202; it comes again under the same webhook-id.
        const resent = yield* api.post(`/v1/deliveries/${first.id}/resend`)
        assert.strictEqual(resent.status, 202, JSON.stringify(resent.body))
        assert.strictEqual(resent.body.state, "pending")
        yield* signals.until(Effect.sync(() => receiver.log.filter((r) => r.status === 200).length === 3))
        const again = receiver.log.filter((r) => r.status === 200)[2]!
        assert.strictEqual(again.headers["webhook-id"], accepted[0]!.headers["webhook-id"])

        // Enable from a seq: an event committed while it was disabled is sent; a seq before the log is 422.
        yield* api.post(`/v1/subscriptions/${id}/disable`)
        const third = yield* TestWebhooks.append("space-1", { i: 3 })
        yield* TestWebhooks.round()
        const fromSeq = yield* api.post(`/v1/subscriptions/${id}/enable?fromSeq=${third.firstSeq}`)
        assert.deepInclude(fromSeq.body, { enabled: true, deliveries: 1 })
        yield* signals.until(
          Effect.sync(() => receiver.log.some((r) => r.status === 200 && TestWebhooks.envelope(r).data.i === 3)),
        )
        yield* api.post(`/v1/subscriptions/${id}/disable`)
        const gone = yield* api.post(`/v1/subscriptions/${id}/enable?fromSeq=0`)
        assert.strictEqual(gone.status, 422)
        assert.strictEqual(gone.body._tag, "SeqNotInLog")
        assert.strictEqual((yield* api.post(`/v1/subscriptions/${id}/enable`)).body.enabled, true)
        assert.strictEqual((yield* api.post(`/v1/subscriptions/${id}/enable`)).body.enabled, false)

        // Push registrations: from a browser's PushSubscription JSON, by principal, removed by id.
        const subscription = TestPush.unheardSubscription()
        const registered = yield* api.post("/v1/registrations", { principal: "alice", subscription })
        assert.strictEqual(registered.status, 201, JSON.stringify(registered.body))
        assert.isTrue(registered.body.created)
        const listed = yield* api.get("/v1/registrations?principal=alice")
        assert.deepStrictEqual(
          listed.body.map((r: { endpoint: string }) => r.endpoint),
          [subscription.endpoint],
        )
        const badKeys = yield* api.post("/v1/registrations", {
          principal: "alice",
          subscription: { ...subscription, keys: { p256dh: "AAAA", auth: "AAAA" } },
        })
        assert.strictEqual(badKeys.status, 400)
        assert.strictEqual(badKeys.body.field, "keys.p256dh")
        assert.strictEqual((yield* api.delete(`/v1/registrations/${registered.body.id}`)).status, 204)
        assert.deepStrictEqual((yield* api.get("/v1/registrations?principal=alice")).body, [])
        assert.strictEqual((yield* api.delete(`/v1/registrations/${registered.body.id}`)).status, 404)
        // Native devices: an APNs device and an FCM token beside the browser; exactly one kind per request.
        const apns = { token: "0f".repeat(32), topic: "com.example.app", environment: "sandbox" }
        const device = yield* api.post("/v1/registrations", { principal: "alice", apns })
        assert.strictEqual(device.status, 201, JSON.stringify(device.body))
        const fcm = yield* api.post("/v1/registrations", { principal: "alice", fcm: { token: "f".repeat(40) } })
        assert.strictEqual(fcm.status, 201, JSON.stringify(fcm.body))
        const devices = yield* api.get("/v1/registrations?principal=alice")
        assert.deepStrictEqual(
          devices.body.map((r: { kind: string; token: string; environment: string }) => [
            r.kind,
            r.token,
            r.environment,
          ]),
          [
            ["fcm", "f".repeat(40), null],
            ["apns", apns.token, "sandbox"],
          ],
        )
        const both = yield* api.post("/v1/registrations", { principal: "alice", apns, fcm: { token: "f".repeat(40) } })
        assert.strictEqual(both.status, 400)
        const badEnvironment = yield* api.post("/v1/registrations", {
          principal: "alice",
          apns: { ...apns, environment: "dev" },
        })
        assert.strictEqual(badEnvironment.status, 400)
        assert.strictEqual(badEnvironment.body.reason, "BadEnvironment")
        for (const r of devices.body) assert.strictEqual((yield* api.delete(`/v1/registrations/${r.id}`)).status, 204)

        // Consumers: position and lag (after a round: the disables appended their operational events).
        yield* TestWebhooks.round()
        const consumers = yield* api.get("/v1/consumers")
        const webhooks = consumers.body.find((c: { name: string }) => c.name === "webhooks")
        assert.strictEqual(webhooks.lag, 0)
        assert.strictEqual(webhooks.lastSeq, webhooks.head)

        // Jobs: counts by state and kind, a page, retry and cancel by id.
        yield* (yield* Jobs).insert([{ kind: "test.later", args: {}, scheduledAt: new Date(Date.now() + 3_600_000) }])
        const counts = yield* api.get("/v1/jobs/counts")
        assert.isTrue(
          counts.body.some(
            (c: { kind: string; state: string; count: number }) =>
              c.kind === "test.later" && c.state === "scheduled" && c.count === 1,
          ),
        )
        const later = (yield* api.get("/v1/jobs?kind=test.later")).body.items
        assert.strictEqual(later.length, 1)
        const cancelled = yield* api.post(`/v1/jobs/${later[0].id}/cancel`)
        assert.deepInclude(cancelled.body, { state: "cancelled" })
        assert.isString(cancelled.body.finalizedAt)
        const again2 = yield* api.post(`/v1/jobs/${later[0].id}/cancel`)
        assert.strictEqual(again2.status, 409)
        assert.strictEqual(again2.body._tag, "JobStateConflict")
        const retried = yield* api.post(`/v1/jobs/${later[0].id}/retry`)
        assert.deepInclude(retried.body, { state: "available", finalizedAt: null })
        assert.strictEqual((yield* api.post("/v1/jobs/999999/retry")).status, 404)

        // Delete: 204, then gone.
        assert.strictEqual((yield* api.delete(`/v1/subscriptions/${id}`)).status, 204)
        assert.strictEqual((yield* api.get(`/v1/subscriptions/${id}`)).status, 404)
      }),
    { timeout: 120_000 },
  )

  it.effect(
    "AdminApiPrincipalSeesOnlyOwn: with a host's AdminAuth, a principal sees and changes only its own subscriptions, deliveries and registrations (another's is a 404), creates only for itself on spaces it may receive, and never sees consumers or jobs",
    () =>
      Effect.gen(function* () {
        // The host maps its own header to a principal; no header: 401.
        const hostAuth = AdminAuth.make((request) => {
          const who = request.headers["x-principal"]
          return who === undefined
            ? Effect.fail(new Unauthenticated({ detail: "no x-principal header" }))
            : Effect.succeed(AdminAuthModule.principal(who))
        })
        const base = yield* TestAdmin.serve(hostAuth)
        const carol = TestAdmin.client(base, { headers: { "x-principal": "carol" } })
        const dave = TestAdmin.client(base, { headers: { "x-principal": "dave" } })
        assert.strictEqual((yield* TestAdmin.client(base).get("/v1/subscriptions")).status, 401)
        const receiver = yield* WebhookReceiver.start(() => ({ status: 200 }))
        yield* PermissionGrants.grant("carol", webhookDeliver, "carol-space")
        yield* PermissionGrants.grant("dave", webhookDeliver, "dave-space")

        // Carol's own subscription, owner implied; for another owner, or a space she may not receive: 422.
        const created = yield* carol.post("/v1/subscriptions", { url: receiver.url("/c"), scope: ["carol-space"] })
        assert.strictEqual(created.status, 201, JSON.stringify(created.body))
        assert.strictEqual(created.body.subscription.owner, "carol")
        const id: string = created.body.subscription.id
        const forDave = yield* carol.post("/v1/subscriptions", {
          owner: "dave",
          url: receiver.url("/c"),
          scope: ["carol-space"],
        })
        assert.strictEqual(forDave.status, 422)
        assert.deepInclude(forDave.body, { _tag: "NotPermitted", field: "owner" })
        const notHers = yield* carol.post("/v1/subscriptions", {
          url: receiver.url("/c"),
          scope: ["carol-space", "dave-space"],
        })
        assert.strictEqual(notHers.status, 422)
        assert.deepInclude(notHers.body, { _tag: "NotPermitted", field: "scope[1]" })
        const widen = yield* carol.patch(`/v1/subscriptions/${id}`, { scope: ["dave-space"] })
        assert.strictEqual(widen.status, 422)
        const daves = yield* dave.post("/v1/subscriptions", { url: receiver.url("/d"), scope: ["dave-space"] })
        assert.strictEqual(daves.status, 201)

        // A delivery of Carol's.
        yield* TestWebhooks.append("carol-space", { i: 1 })
        yield* TestWebhooks.round()
        const [delivery] = (yield* carol.get(`/v1/subscriptions/${id}/deliveries`)).body.items
        assert.isDefined(delivery)

        // Dave sees none of it: every path answers as for an id that does not exist.
        const listed = yield* dave.get("/v1/subscriptions")
        assert.deepStrictEqual(
          listed.body.items.map((s: { owner: string }) => s.owner),
          ["dave"],
        )
        assert.deepStrictEqual((yield* dave.get("/v1/subscriptions?owner=carol")).body.items, [])
        const attempts = [
          yield* dave.get(`/v1/subscriptions/${id}`),
          yield* dave.patch(`/v1/subscriptions/${id}`, { url: receiver.url("/stolen") }),
          yield* dave.post(`/v1/subscriptions/${id}/disable`),
          yield* dave.post(`/v1/subscriptions/${id}/enable`),
          yield* dave.post(`/v1/subscriptions/${id}/rotate-secret`),
          yield* dave.delete(`/v1/subscriptions/${id}`),
          yield* dave.get(`/v1/subscriptions/${id}/deliveries`),
          yield* dave.post(`/v1/subscriptions/${id}/recover`, { since: new Date(0).toISOString() }),
        ]
        for (const a of attempts) {
          assert.strictEqual(a.status, 404, JSON.stringify(a.body))
          assert.strictEqual(a.body._tag, "SubscriptionNotFound")
        }
        for (const a of [
          yield* dave.get(`/v1/deliveries/${delivery.id}`),
          yield* dave.post(`/v1/deliveries/${delivery.id}/resend`),
        ]) {
          assert.strictEqual(a.status, 404)
          assert.strictEqual(a.body._tag, "DeliveryNotFound")
        }
        const unknown = yield* dave.get("/v1/subscriptions/0b9f6a2e-3c1d-4c5b-9a57-3f1f0f6c2d11")
        assert.deepStrictEqual(unknown.body, { ...attempts[0]!.body, id: "0b9f6a2e-3c1d-4c5b-9a57-3f1f0f6c2d11" })
        const still = yield* carol.get(`/v1/subscriptions/${id}`)
        assert.deepInclude(still.body, { state: "active", url: receiver.url("/c") })

        // Registrations: her own only.
        const registered = yield* carol.post("/v1/registrations", { subscription: TestPush.unheardSubscription() })
        assert.strictEqual(registered.status, 201, JSON.stringify(registered.body))
        const forOther = yield* carol.post("/v1/registrations", {
          principal: "dave",
          subscription: TestPush.unheardSubscription(),
        })
        assert.strictEqual(forOther.status, 422)
        assert.strictEqual((yield* carol.get("/v1/registrations")).body.length, 1)
        assert.deepStrictEqual((yield* dave.get("/v1/registrations?principal=carol")).body, [])
        const removal = yield* dave.delete(`/v1/registrations/${registered.body.id}`)
        assert.strictEqual(removal.status, 404)
        assert.strictEqual(removal.body._tag, "RegistrationNotFound")
        assert.strictEqual((yield* carol.get("/v1/registrations")).body.length, 1)

        // Consumers and jobs span every tenant: 403.
        for (const path of ["/v1/consumers", "/v1/jobs", "/v1/jobs/counts"]) {
          const a = yield* carol.get(path)
          assert.strictEqual(a.status, 403, path)
          assert.strictEqual(a.body._tag, "OperatorOnly")
        }
        assert.strictEqual((yield* carol.delete(`/v1/subscriptions/${id}`)).status, 204)
      }),
  )

  it.effect(
    "AdminApiRequiresToken: with BOTHY_ADMIN_TOKEN set, a missing or wrong bearer token is a 401 and the right one gets in; without a token the API serves loopback only and refuses to start on any other address",
    () =>
      Effect.gen(function* () {
        const base = yield* TestAdmin.serve(AdminAuth.token(Option.some(Redacted.make(token))))
        const none = yield* TestAdmin.client(base).get("/v1/subscriptions")
        assert.strictEqual(none.status, 401)
        assert.strictEqual(none.body._tag, "Unauthenticated")
        for (const wrong of ["wrong", `${token}x`, token.slice(0, -1)]) {
          assert.strictEqual((yield* TestAdmin.client(base, { token: wrong }).get("/v1/subscriptions")).status, 401)
        }
        const basic = yield* TestAdmin.call(base, "GET", "/v1/consumers", {
          headers: { authorization: `Basic ${token}` },
        })
        assert.strictEqual(basic.status, 401)
        assert.strictEqual((yield* TestAdmin.client(base, { token }).get("/v1/subscriptions")).status, 200)
        // The document and the docs page are public: they describe the API, they hold no data.
        assert.strictEqual((yield* TestAdmin.call(base, "GET", "/openapi.json")).status, 200)

        // No token: open on loopback, refused elsewhere with one clear error.
        const open = AdminAuth.token(Option.none())
        const local = yield* TestAdmin.serve(open)
        assert.strictEqual((yield* TestAdmin.client(local).get("/v1/consumers")).status, 200)
        const refused = yield* Effect.flip(TestAdmin.serve(open, { host: "0.0.0.0", port: 0 }))
        assert.instanceOf(refused, AdminServer.AdminTokenRequired)
        assert.match(refused.message, /BOTHY_ADMIN_TOKEN/)
        // With a token, any address is fine.
        yield* TestAdmin.serve(AdminAuth.token(Option.some(Redacted.make(token))), { host: "0.0.0.0", port: 0 })

        // An address already taken stops the start naming the setting.
        const port = Number(new URL(local).port)
        const taken = yield* Effect.flip(TestAdmin.serve(open, { host: "127.0.0.1", port }))
        assert.instanceOf(taken, AdminServer.AdminAddressUnavailable)
        assert.match(taken.message, /BOTHY_ADMIN_ADDRESS.*EADDRINUSE/)
      }),
  )
})
