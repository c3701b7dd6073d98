/**
 * `bothy.delivery.dead`: a delivery that goes dead without a request (no right on its space, or
 * the space left the scope) appends one event in the owner's space, in the transaction that ends
 * it, and the owner's `bothy.*` subscription gets it. A dead delivery of a `bothy.*` event reports
 * nothing, so two subscriptions that may not read their owner's space do not report each other.
 */
import { assert, layer } from "@effect/vitest"
import { Effect } from "effect"
import { SqlClient } from "effect/sql"
import * as PermissionGrants from "../../../src/authz/PermissionGrants.ts"
import { webhookDeliver } from "../../../src/authz/Permissions.ts"
import * as OperationalEvents from "../../../src/webhooks/subscriptions/OperationalEvents.ts"
import { WebhookSubscriptions } from "../../../src/webhooks/subscriptions/WebhookSubscriptions.ts"
import * as WebhookReceiver from "../../../testkit/WebhookReceiver.ts"
import * as TestWebhooks from "../../support/TestWebhooks.ts"

const owner = "dead-owner"

interface Row {
  readonly id: bigint
  readonly type: string
  readonly state: string
  readonly reason: string | null
  readonly seq: bigint
}

/** The subscription's deliveries with their event's type, in seq order. */
const deliveries = (subscriptionId: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql<Row>`
      SELECT d.id, e.type, d.state, d.dead_reason AS reason, d.event_seq AS seq
      FROM webhook_deliveries AS d JOIN event_log AS e ON e.seq = d.event_seq
      WHERE d.subscription_id = ${subscriptionId}::uuid ORDER BY d.event_seq`,
  )

/** The `bothy.delivery.dead` events about the subscription, in seq order. */
const deadReports = (subscriptionId: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql<{ space: string; actor: string; payload: Record<string, unknown> }>`
      SELECT space_id AS space, actor, payload FROM event_log
      WHERE type = ${OperationalEvents.deliveryDead} AND payload->>'subscription' = ${subscriptionId}
      ORDER BY seq`,
  )

const settled = (rows: ReadonlyArray<Row>) => rows.length > 0 && rows.every((r) => r.state !== "pending")

layer(TestWebhooks.layer(), { excludeTestServices: true })("dead delivery events", (it) => {
  it.effect(
    "OperationalEventOnDeadDelivery: a delivery suppressed for want of the right reports itself once to the owner's bothy.* subscription; a dead bothy.* delivery reports nothing",
    () =>
      Effect.gen(function* () {
        const receiver = yield* WebhookReceiver.start(() => ({ status: 200 }))
        const subject = yield* TestWebhooks.subscribe(owner, receiver.url("/subject"), ["dead-space"])
        const ops = yield* TestWebhooks.subscribe(owner, receiver.url("/ops"), [owner], ["bothy.*"])
        const other = yield* TestWebhooks.subscribe(owner, receiver.url("/other"), [owner], ["bothy.*"])
        yield* PermissionGrants.revoke(owner, webhookDeliver, "dead-space")
        yield* TestWebhooks.append("dead-space", { i: 0 })
        yield* TestWebhooks.round()
        const signals = yield* TestWebhooks.signals
        yield* TestWebhooks.startDrainers(signals)

        yield* signals.until(Effect.map(deliveries(subject.id), settled))
        const [dead] = yield* deliveries(subject.id)
        assert.deepStrictEqual([dead!.state, dead!.reason], ["dead", "permission"])
        const reports = yield* deadReports(subject.id)
        assert.deepStrictEqual(reports, [
          {
            space: owner,
            actor: "bothy",
            payload: {
              subscription: subject.id,
              owner,
              delivery: String(dead!.id),
              eventSeq: String(dead!.seq),
              space: "dead-space",
              reason: "permission",
            },
          },
        ])
        assert.strictEqual(receiver.log.filter((r) => r.path === "/subject").length, 0, "nothing sent for it")

        // Both of the owner's bothy.* subscriptions hear of it, as an ordinary event.
        yield* TestWebhooks.round()
        for (const id of [ops.id, other.id]) {
          yield* signals.until(Effect.map(deliveries(id), settled))
          const rows = yield* deliveries(id)
          assert.deepStrictEqual(
            rows.map((r) => [r.type, r.state]),
            [[OperationalEvents.deliveryDead, "delivered"]],
          )
        }

        // Now the owner may not read its own space: the next report dies at both bothy.*
        // subscriptions, and those deaths report nothing (else each would report the other's).
        yield* PermissionGrants.revoke(owner, webhookDeliver, owner)
        yield* TestWebhooks.append("dead-space", { i: 1 })
        yield* TestWebhooks.round()
        yield* signals.until(Effect.map(deadReports(subject.id), (rs) => rs.length === 2))
        yield* TestWebhooks.round()
        for (const id of [ops.id, other.id]) {
          yield* signals.until(Effect.map(deliveries(id), (rs) => rs.length === 2 && settled(rs)))
          const rows = yield* deliveries(id)
          assert.deepStrictEqual(
            rows.map((r) => [r.type, r.state, r.reason]),
            [
              [OperationalEvents.deliveryDead, "delivered", null],
              [OperationalEvents.deliveryDead, "dead", "permission"],
            ],
          )
          assert.deepStrictEqual(yield* deadReports(id), [], "a dead bothy.* delivery reports nothing")
        }
        yield* TestWebhooks.round()
        assert.deepStrictEqual(
          (yield* deliveries(ops.id)).length,
          2,
          "nothing more reached the owner's subscriptions: no loop",
        )
        assert.strictEqual((yield* (yield* WebhookSubscriptions).get(subject.id)).state, "active")
      }).pipe(Effect.scoped),
  )
})
