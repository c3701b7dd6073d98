/**
 * A test event goes to the subscription it names and to no other, whatever the types and filters:
 * not to the owner's other subscription that takes `bothy.*`, nor to another owner's on the same
 * space. It goes the way every event goes (numbered, signed, verified by the receiver's library),
 * and a subscription with nothing in its scope, or none at all, is refused with a typed error.
 */
import { assert, layer } from "@effect/vitest"
import { Effect, Queue, Redacted } from "effect"
import { SqlClient } from "effect/sql"
import { Webhook } from "standardwebhooks"
import { testEventType } from "../../../src/log/TestEvent.ts"
import { WebhookSubscriptions } from "../../../src/webhooks/subscriptions/WebhookSubscriptions.ts"
import * as WebhookReceiver from "../../../testkit/WebhookReceiver.ts"
import * as TestWebhooks from "../../support/TestWebhooks.ts"

const rowsFor = (subscriptionId: string, seq: bigint) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) =>
      sql`SELECT 1 FROM webhook_deliveries WHERE subscription_id = ${subscriptionId}::uuid AND event_seq = ${seq}`,
  )

layer(TestWebhooks.layer(), { excludeTestServices: true })("a subscription's test event", (it) => {
  it.effect(
    "TestEventOnlyToItsSubscription: the named subscription takes it despite its types and filter, signed under its next sequence; the owner's bothy.* subscription and another owner's on the same space do not",
    () =>
      Effect.gen(function* () {
        const webhooks = yield* WebhookSubscriptions
        const signals = yield* TestWebhooks.signals
        const receiver = yield* WebhookReceiver.start(() => ({ status: 200 }))
        const named = yield* TestWebhooks.subscribe("te-owner", receiver.url("/named"), ["te-b", "te-a"], ["order.*"], {
          path: "$.total",
          gt: 1000,
        })
        const ops = yield* TestWebhooks.subscribe("te-owner", receiver.url("/ops"), ["te-a"], ["bothy.*"])
        const other = yield* TestWebhooks.subscribe("te-other", receiver.url("/other"), ["te-a"])
        yield* TestWebhooks.startDrainers(signals)

        const sent = yield* webhooks.sendTestEvent(named.id, "te-owner")
        assert.deepStrictEqual([sent.space, sent.type], ["te-a", testEventType], "in the lowest space of its scope")
        yield* TestWebhooks.round()
        const request = yield* Queue.take(receiver.received)
        assert.strictEqual(request.path, "/named")
        const verified = new Webhook(Redacted.value(named.secret)).verify(
          request.body,
          request.headers as Record<string, string>,
        ) as { type: string; sequence: number; space: string; data: Record<string, unknown> }
        assert.strictEqual(verified.type, testEventType)
        assert.strictEqual(verified.sequence, 1)
        assert.deepStrictEqual(verified.data, { subscription: named.id, owner: "te-owner", requestedBy: "te-owner" })
        assert.strictEqual((yield* rowsFor(ops.id, sent.seq)).length, 0, "not the owner's bothy.* subscription")
        assert.strictEqual((yield* rowsFor(other.id, sent.seq)).length, 0, "not another owner's on the space")
        yield* signals.until(
          Effect.map(TestWebhooks.deliveries(named.id), (rows) => rows.every((d) => d.state === "delivered")),
        )
        assert.strictEqual(receiver.log.length, 1, "one request in all")
      }).pipe(Effect.scoped),
  )

  it.effect(
    "TestEventRefusals: a subscription whose scope is empty is refused with TestEventNeedsScope, one that does not exist with SubscriptionNotFound, and nothing is appended",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const webhooks = yield* WebhookSubscriptions
        const sub = yield* TestWebhooks.subscribe("te-empty", "http://127.0.0.1:9/empty", ["te-gone"])
        yield* sql`DELETE FROM webhook_subscription_spaces WHERE subscription_id = ${sub.id}::uuid`
        const before = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM event_log WHERE type = ${testEventType}`
        const empty = yield* Effect.flip(webhooks.sendTestEvent(sub.id, "te-empty"))
        assert.strictEqual(empty._tag, "TestEventNeedsScope")
        assert.include(empty.message, sub.id)
        const missing = yield* Effect.flip(webhooks.sendTestEvent("00000000-0000-0000-0000-000000000000", "x"))
        assert.strictEqual(missing._tag, "SubscriptionNotFound")
        const after = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM event_log WHERE type = ${testEventType}`
        assert.strictEqual(after[0]!.n, before[0]!.n)
      }),
  )
})
