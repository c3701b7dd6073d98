import { assert, layer } from "@effect/vitest"
import { Duration, Effect, Logger, Queue, Redacted, type Schema } from "effect"
import { SqlClient } from "effect/sql"
import { Webhook } from "standardwebhooks"
import * as PermissionGrants from "../../../src/authz/PermissionGrants.ts"
import { webhookDeliver } from "../../../src/authz/Permissions.ts"
import { WebhookSubscriptions } from "../../../src/webhooks/subscriptions/WebhookSubscriptions.ts"
import * as WebhookReceiver from "../../../testkit/WebhookReceiver.ts"
import * as TestWebhooks from "../../support/TestWebhooks.ts"

const Live = TestWebhooks.layer({ retrySteps: [Duration.millis(20)] })

const round = TestWebhooks.round()

/** Delivery jobs run from here on, for the rest of the test's scope; their records wake `signals`. */
const startDeliveries = (signals: TestWebhooks.Signals) =>
  TestWebhooks.startDrainers(signals, { concurrency: 8, pollInterval: "200 millis" })

const subscribe = TestWebhooks.subscribe

const append = (space: string, type: string, payload: Schema.Json) => TestWebhooks.append(space, payload, type)

const deliveries = (subscriptionId: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql<{
      eventSeq: bigint
      state: string
      deadReason: string | null
      attempts: number
      sequence: bigint | null
    }>`
      SELECT event_seq AS "eventSeq", state, dead_reason AS "deadReason", attempts, sequence
      FROM webhook_deliveries WHERE subscription_id = ${subscriptionId}::uuid ORDER BY event_seq`,
  )

/** Waits until no delivery of the subscription is pending. */
const settled = (signals: TestWebhooks.Signals, subscriptionId: string) =>
  signals.until(Effect.map(deliveries(subscriptionId), (rows) => rows.every((d) => d.state !== "pending")))

const subscription = (id: string) => Effect.flatMap(WebhookSubscriptions, (w) => w.get(id))

layer(Live, { excludeTestServices: true })("WebhookSubscriptions", (it) => {
  it.effect(
    "DeliveryRevokedRightIsDeadWithoutRequest: revoked between round and job; the deliveries behind go out",
    () =>
      Effect.gen(function* () {
        const signals = yield* TestWebhooks.signals
        const receiver = yield* WebhookReceiver.start(() => ({ status: 200 }))
        const sub = yield* subscribe("owner-r", receiver.url("/revoked"), ["rev-a", "rev-b"])
        yield* append("rev-a", "item.created", { n: 1 })
        yield* append("rev-b", "item.created", { n: 2 })
        yield* append("rev-b", "item.created", { n: 3 })
        const e4 = yield* append("rev-a", "item.created", { n: 4 })
        assert.strictEqual((yield* round)._tag, "Processed")
        yield* PermissionGrants.revoke("owner-r", webhookDeliver, "rev-a")
        yield* startDeliveries(signals)
        yield* settled(signals, sub.id)
        const rows = yield* deliveries(sub.id)
        assert.deepStrictEqual(
          rows.map((d) => [d.state, d.deadReason, d.attempts, d.sequence]),
          [
            ["dead", "permission", 0, null],
            ["delivered", null, 1, 1n],
            ["delivered", null, 1, 2n],
            ["dead", "permission", 0, null],
          ],
          "the suppressed ones took no number",
        )
        assert.deepStrictEqual(
          receiver.log
            .map((r) => JSON.parse(r.body) as { sequence: number; data: { n: number } })
            .map((e) => [e.data.n, e.sequence]),
          [
            [2, 1],
            [3, 2],
          ],
          "no request for the revoked space; the receiver's sequence has no gap",
        )
        assert.strictEqual((yield* subscription(sub.id)).lastDeliveredSeq, e4.lastSeq, "moved past the dead ones")
      }).pipe(Effect.scoped),
  )

  it.effect("WebhookRoundJobsCarryTheEventTrace: each drain job carries its subscription's first event's trace", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const a = yield* subscribe("owner-t", "http://127.0.0.1:9/a", ["trace-a"])
      const b = yield* subscribe("owner-t", "http://127.0.0.1:9/b", ["trace-b"])
      const first = yield* append("trace-a", "item.created", { n: 1 }).pipe(Effect.withSpan("producer-a"))
      yield* append("trace-b", "item.created", { n: 2 }).pipe(Effect.withSpan("producer-b"))
      yield* append("trace-a", "item.created", { n: 3 }).pipe(Effect.withSpan("producer-a-again"))
      assert.strictEqual((yield* round)._tag, "Processed")
      const rows = yield* sql<{ subscription: string; jobTrace: string | null; eventTrace: string | null }>`
        SELECT j.args->>'subscription' AS subscription, j.trace_parent AS "jobTrace", e.trace_parent AS "eventTrace"
        FROM jobs AS j
        JOIN event_log AS e ON e.seq = (
          SELECT min(event_seq) FROM webhook_deliveries WHERE subscription_id = (j.args->>'subscription')::uuid)
        WHERE j.args->>'subscription' IN (${a.id}, ${b.id})
        ORDER BY 1`
      assert.deepStrictEqual(rows.map((r) => r.subscription).sort(), [a.id, b.id].sort())
      for (const r of rows) {
        assert.isNotNull(r.eventTrace)
        assert.strictEqual(r.jobTrace, r.eventTrace)
      }
      const [own] = yield* sql<{
        trace: string
      }>`SELECT trace_parent AS trace FROM event_log WHERE seq = ${first.lastSeq}`
      assert.strictEqual(
        rows.find((r) => r.subscription === a.id)?.jobTrace,
        own?.trace,
        "the first event's, not a later one's",
      )
    }).pipe(Effect.scoped),
  )

  it.effect("DeliveryScopeRemovedIsDead: the space leaves the subscription's scope between round and job", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const signals = yield* TestWebhooks.signals
      const receiver = yield* WebhookReceiver.start(() => ({ status: 200 }))
      const sub = yield* subscribe("owner-s", receiver.url("/scoped"), ["scope-a", "scope-b"])
      yield* append("scope-a", "item.created", { n: 1 })
      yield* append("scope-b", "item.created", { n: 2 })
      assert.strictEqual((yield* round)._tag, "Processed")
      yield* sql`DELETE FROM webhook_subscription_spaces WHERE subscription_id = ${sub.id}::uuid AND space_id = 'scope-a'`
      yield* startDeliveries(signals)
      yield* settled(signals, sub.id)
      assert.deepStrictEqual(
        (yield* deliveries(sub.id)).map((d) => [d.state, d.deadReason]),
        [
          ["dead", "scope"],
          ["delivered", null],
        ],
      )
      assert.strictEqual(receiver.log.length, 1)
    }).pipe(Effect.scoped),
  )

  it.effect("HeadDeliveryEventGoneDisablesWithGap: the head delivery's event left the log", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const signals = yield* TestWebhooks.signals
      const receiver = yield* WebhookReceiver.start(() => ({ status: 200 }))
      const sub = yield* subscribe("owner-g", receiver.url("/gone-event"), ["gap-a"])
      const e1 = yield* append("gap-a", "item.created", { n: 1 })
      yield* append("gap-a", "item.created", { n: 2 })
      assert.strictEqual((yield* round)._tag, "Processed")
      yield* sql`DELETE FROM event_log WHERE seq = ${e1.lastSeq}`
      yield* startDeliveries(signals)
      yield* settled(signals, sub.id)
      const s = yield* subscription(sub.id)
      assert.deepStrictEqual([s.state, s.disabledCause], ["disabled", "gap"])
      assert.deepStrictEqual(
        (yield* deliveries(sub.id)).map((d) => [d.state, d.deadReason]),
        [
          ["dead", "disabled:gap"],
          ["dead", "disabled:gap"],
        ],
      )
      assert.strictEqual(receiver.log.length, 0)
    }).pipe(Effect.scoped),
  )

  it.effect("ConsumerLossDisablesSubscriptions: a lost range disables those that began before it, not later ones", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const receiver = yield* WebhookReceiver.start(() => ({ status: 200 }))
      const before = yield* subscribe("owner-l", receiver.url("/before"), ["loss-a"])
      const other = yield* subscribe("owner-l", receiver.url("/other-space"), ["loss-b"])
      const first = yield* append("loss-a", "item.created", { n: 1 })
      const last = yield* append("loss-a", "item.created", { n: 2 })
      const after = yield* subscribe("owner-l", receiver.url("/after"), ["loss-a"])
      // Retention removed them before the consumer read them.
      yield* sql`DELETE FROM event_log WHERE seq BETWEEN ${first.lastSeq} AND ${last.lastSeq}`
      const outcome = yield* round
      assert.strictEqual(outcome._tag, "Processed")
      assert.deepStrictEqual(outcome._tag === "Processed" ? outcome.lost.at(-1)?.lastSeq : undefined, last.lastSeq)
      assert.deepStrictEqual(
        [(yield* subscription(before.id)).disabledCause, (yield* subscription(other.id)).disabledCause],
        ["gap", "gap"],
        "every subscription that began before the range's end may have missed events of it",
      )
      const later = yield* subscription(after.id)
      assert.deepStrictEqual([later.state, later.disabledCause], ["active", null])
    }).pipe(Effect.scoped),
  )

  it.effect("Webhook410DisablesGone: a 410 disables the subscription with cause gone", () =>
    Effect.gen(function* () {
      const signals = yield* TestWebhooks.signals
      const receiver = yield* WebhookReceiver.start(() => ({ status: 410 }))
      const sub = yield* subscribe("owner-410", receiver.url("/gone"), ["gone-a"])
      yield* append("gone-a", "item.created", { n: 1 })
      yield* append("gone-a", "item.created", { n: 2 })
      yield* round
      yield* startDeliveries(signals)
      yield* settled(signals, sub.id)
      const s = yield* subscription(sub.id)
      assert.deepStrictEqual([s.state, s.disabledCause], ["disabled", "gone"])
      assert.strictEqual(receiver.log.length, 1, "one request, then nothing more")
    }).pipe(Effect.scoped),
  )

  it.effect("WebhookSecretRotationSignsWithBoth: during the overlap both secrets sign; after it only the new one", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const webhooks = yield* WebhookSubscriptions
      const signals = yield* TestWebhooks.signals
      const receiver = yield* WebhookReceiver.start(() => ({ status: 200 }))
      const sub = yield* subscribe("owner-rot", receiver.url("/rotated"), ["rot-a"])
      const fresh = yield* webhooks.rotateSecret(sub.id)
      const [row] = yield* sql<{ until: Date }>`
        SELECT previous_secret_until AS until FROM webhook_subscriptions WHERE id = ${sub.id}::uuid`
      assert.approximately(row!.until.getTime() - Date.now(), 24 * 3_600_000, 60_000)
      yield* startDeliveries(signals)
      yield* append("rot-a", "item.created", { n: 1 })
      yield* round
      const during = yield* Queue.take(receiver.received)
      assert.strictEqual(String(during.headers["webhook-signature"]).split(" ").length, 2)
      const verify = (secret: Redacted.Redacted<string>, r: WebhookReceiver.Received) =>
        new Webhook(Redacted.value(secret)).verify(r.body, r.headers as Record<string, string>)
      verify(sub.secret, during)
      verify(fresh, during)

      // The overlap ends.
      yield* sql`UPDATE webhook_subscriptions SET previous_secret_until = clock_timestamp() WHERE id = ${sub.id}::uuid`
      yield* append("rot-a", "item.created", { n: 2 })
      yield* round
      const after = yield* Queue.take(receiver.received)
      assert.strictEqual(String(after.headers["webhook-signature"]).split(" ").length, 1)
      verify(fresh, after)
      assert.throws(() => verify(sub.secret, after))
    }).pipe(Effect.scoped),
  )

  it.effect(
    "WebhooksUpdateChangesTargetFilterScopeAndOptions: one update changes them together; the next round follows it; a bad patch changes nothing",
    () =>
      Effect.gen(function* () {
        const webhooks = yield* WebhookSubscriptions
        const receiver = yield* WebhookReceiver.start(() => ({ status: 200 }))
        for (const space of ["upd-a", "upd-b"]) yield* PermissionGrants.grant("owner-u", webhookDeliver, space)
        const { id } = yield* webhooks.create({
          owner: "owner-u",
          url: receiver.url("/before"),
          scope: ["upd-a"],
          eventTypes: [],
          rateLimit: 5,
          headers: { "X-Api-Key": "k1" },
        })
        const created = yield* webhooks.get(id)
        assert.deepStrictEqual([created.rateLimit, created.headers], [5, { "x-api-key": "k1" }])

        const updated = yield* webhooks.update(id, {
          url: receiver.url("/after"),
          eventTypes: ["item.moved"],
          scope: ["upd-b"],
          rateLimit: null,
          headers: { "X-Tenant": "t9" },
        })
        assert.deepStrictEqual(
          [updated.url, updated.eventTypes, updated.scope, updated.rateLimit, updated.headers],
          [receiver.url("/after"), ["item.moved"], ["upd-b"], null, { "x-tenant": "t9" }],
        )
        // An absent field stays as it is.
        assert.deepStrictEqual((yield* webhooks.update(id, { rateLimit: 0.5 })).scope, ["upd-b"])

        yield* append("upd-a", "item.moved", { n: 1 })
        yield* append("upd-b", "item.created", { n: 2 })
        const e3 = yield* append("upd-b", "item.moved", { n: 3 })
        assert.strictEqual((yield* round)._tag, "Processed")
        assert.deepStrictEqual(
          (yield* deliveries(id)).map((d) => d.eventSeq),
          [e3.lastSeq],
          "only the new scope's new type",
        )

        const refused = yield* Effect.flip(
          webhooks.update(id, { url: receiver.url("/x"), headers: { "webhook-id": "forged" } }),
        )
        assert.deepStrictEqual(
          [refused._tag, refused._tag === "InvalidSubscription" && refused.field],
          ["InvalidSubscription", 'headers["webhook-id"]'],
        )
        assert.strictEqual((yield* webhooks.get(id)).url, receiver.url("/after"), "nothing written")
        const missing = yield* Effect.flip(webhooks.update("00000000-0000-4000-8000-000000000000", { rateLimit: 1 }))
        assert.strictEqual(missing._tag, "SubscriptionNotFound")
      }).pipe(Effect.scoped),
  )

  it.effect(
    "SubscriptionDeleteLogsDeleted: deleting a subscription logs one line saying it was deleted, never that it was disabled with cause manual; disabling one still says that",
    () =>
      Effect.gen(function* () {
        const webhooks = yield* WebhookSubscriptions
        const lines: Array<string> = []
        const capture = Logger.layer(
          [
            Logger.make(({ message }) => {
              lines.push((Array.isArray(message) ? message : [message]).map(String).join(" "))
            }),
          ],
          { mergeWithExisting: true },
        )
        const active = yield* subscribe("del-owner", "http://127.0.0.1:9/a", ["del-space"])
        const disabled = yield* subscribe("del-owner", "http://127.0.0.1:9/b", ["del-space"])
        yield* webhooks.disable(disabled.id).pipe(Effect.provide(capture))
        assert.deepStrictEqual(lines, [`webhooks: subscription ${disabled.id} disabled with cause manual`])
        lines.length = 0
        for (const id of [active.id, disabled.id]) yield* webhooks.remove(id).pipe(Effect.provide(capture))
        assert.deepStrictEqual(lines, [
          `webhooks: subscription ${active.id} of del-owner deleted with its delivery history`,
          `webhooks: subscription ${disabled.id} of del-owner deleted with its delivery history`,
        ])
        assert.strictEqual((yield* Effect.flip(webhooks.get(active.id)))._tag, "SubscriptionNotFound")
      }),
  )
})
