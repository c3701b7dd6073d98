import { assert, layer } from "@effect/vitest"
import { Effect, Exit } from "effect"
import { SqlClient } from "effect/sql"
import * as PermissionGrants from "../../../src/authz/PermissionGrants.ts"
import { webhookDeliver } from "../../../src/authz/Permissions.ts"
import { dayName } from "../../../src/log/EventLogPartitions.ts"
import * as WebhookDrainer from "../../../src/webhooks/drain/WebhookDrainer.ts"
import * as WebhookReceiver from "../../../testkit/WebhookReceiver.ts"
import { appendAt, dayMillis, days } from "../../support/OldEvents.ts"
import * as TestWebhooks from "../../support/TestWebhooks.ts"

layer(TestWebhooks.layer(), { excludeTestServices: true })("The drainer's event window", (it) => {
  it.effect(
    "DrainWindowTooNarrowLosesNothing: events stamped two hours past the database's clock (a clock stepped back) lie outside the window a drain read looks them up in; the read is made again without it, and they are delivered in order, the subscription left active",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const receiver = yield* WebhookReceiver.start(() => ({ status: 200 }))
        yield* PermissionGrants.grant("owner-w", webhookDeliver, "ahead")
        const sub = yield* TestWebhooks.subscribe("owner-w", receiver.url("/w"), ["ahead"])
        const now = Date.now()
        yield* TestWebhooks.append("ahead", { i: 0 })
        const later = [now + 2 * 3_600_000, now + 2 * 3_600_000 + 1, now + 3 * 3_600_000]
        yield* appendAt(later, "ahead")
        yield* TestWebhooks.round()
        const pending = yield* sql<{ n: number }>`
          SELECT count(*)::int AS n FROM webhook_deliveries WHERE subscription_id = ${sub.id}::uuid AND state = 'pending'`
        assert.strictEqual(pending[0]?.n, 4)
        assert.isBelow(later[0]! - dayMillis, now, "within the partitions made ahead")

        const kind = yield* WebhookDrainer.makeWith({ linger: 0 })
        yield* Effect.ignore(kind.run({ subscription: sub.id }, yield* TestWebhooks.drainJob(sub.id)))

        const rows = yield* TestWebhooks.deliveries(sub.id)
        assert.deepStrictEqual(
          rows.map((d) => [d.state, d.sequence]),
          [
            ["delivered", 1n],
            ["delivered", 2n],
            ["delivered", 3n],
            ["delivered", 4n],
          ],
        )
        const [state] = yield* sql<{
          state: string
        }>`SELECT state FROM webhook_subscriptions WHERE id = ${sub.id}::uuid`
        assert.strictEqual(state?.state, "active")
        const ids = receiver.log.map((r) => String(r.headers["webhook-id"]))
        assert.strictEqual(new Set(ids).size, 4, "each delivered once")
      }).pipe(Effect.scoped),
  )
})

// A database of its own: its events are older than the ones the test above appends.
layer(TestWebhooks.layer(), { excludeTestServices: true })("The drainer's read over a dropped day", (it) => {
  it.effect(
    "DrainReadOverADroppedDayReadsTheLog: a drain read looks its events up in its window's day partitions by name; when retention dropped one of them the read is made again over event_log, which finds the event lost (a gap: the subscription is disabled) instead of failing every run",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const receiver = yield* WebhookReceiver.start(() => ({ status: 200 }))
        yield* PermissionGrants.grant("owner-d", webhookDeliver, "old")
        const sub = yield* TestWebhooks.subscribe("owner-d", receiver.url("/d"), ["old"])
        const now = Date.now()
        yield* days(now - dayMillis, 1)
        yield* appendAt([now - dayMillis, now])
        yield* TestWebhooks.round()
        const yesterday = sql(dayName(new Date(now - dayMillis)))
        yield* sql`ALTER TABLE event_log DETACH PARTITION ${yesterday}`
        yield* sql`DROP TABLE ${yesterday}`

        const kind = yield* WebhookDrainer.makeWith({ linger: 0 })
        const exit = yield* Effect.exit(kind.run({ subscription: sub.id }, yield* TestWebhooks.drainJob(sub.id)))
        assert.isTrue(Exit.isSuccess(exit), `the run failed: ${String(exit)}`)
        const rows = yield* TestWebhooks.deliveries(sub.id)
        // What a read over event_log makes of a lost event: a gap, which disables the subscription.
        assert.deepStrictEqual(
          rows.map((d) => [d.state, d.deadReason]),
          [
            ["dead", "disabled:gap"],
            ["dead", "disabled:gap"],
          ],
        )
        const [state] = yield* sql<{ state: string; cause: string | null }>`
          SELECT state, disabled_cause AS cause FROM webhook_subscriptions WHERE id = ${sub.id}::uuid`
        assert.deepStrictEqual(state, { state: "disabled", cause: "gap" })
        assert.strictEqual(receiver.log.length, 0)
      }).pipe(Effect.scoped),
  )
})
