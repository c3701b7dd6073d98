import { assert, layer } from "@effect/vitest"
import { Duration, Effect, Layer, Queue } from "effect"
import { SqlClient, Statement } from "effect/sql"
import { TestClock } from "effect/testing"
import * as DeliveryHistory from "../../../src/webhooks/subscriptions/DeliveryHistory.ts"
import { WebhookSubscriptions } from "../../../src/webhooks/subscriptions/WebhookSubscriptions.ts"
import * as WebhookReceiver from "../../../testkit/WebhookReceiver.ts"
import * as TestWebhooks from "../../support/TestWebhooks.ts"

/** Runs `effect`, counting its statements whose text matches `pattern`. */
const counting = <A, E, R>(pattern: RegExp, effect: Effect.Effect<A, E, R>) =>
  Effect.gen(function* () {
    let statements = 0
    const transformer: Statement.Transformer = (self) =>
      Effect.sync(() => {
        if (pattern.test(self.compile()[0])) statements++
        return self
      })
    const result = yield* Effect.provideService(effect, Statement.CurrentTransformer, transformer)
    return { result, statements }
  })

/** `n` deliveries of `subscription` in `state`, finished `daysAgo` days ago (pending: created then), each with two attempts. */
const history = (
  subscription: string,
  n: number,
  state: "delivered" | "dead" | "pending",
  daysAgo: number,
  from: number,
) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    yield* sql`
      WITH d AS (
        INSERT INTO webhook_deliveries (subscription_id, event_seq, epoch, sequence, state, attempts, created_at, finished_at)
        SELECT ${subscription}::uuid, ${from} + i, 1, ${from} + i, ${state}, 2,
               clock_timestamp() - make_interval(days => ${daysAgo}),
               CASE WHEN ${state} = 'pending' THEN NULL ELSE clock_timestamp() - make_interval(days => ${daysAgo}) END
        FROM generate_series(1, ${n}) AS i
        RETURNING id
      )
      INSERT INTO webhook_attempts (delivery_id, number, started_at, duration_ms, status, response_body)
      SELECT d.id, k, clock_timestamp(), 5, 500, repeat('x', 100) FROM d CROSS JOIN generate_series(1, 2) AS k`
  })

const counts = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const [row] = yield* sql<{ finishedOld: number; finishedNew: number; pending: number; attempts: number }>`
    SELECT count(*) FILTER (WHERE state <> 'pending' AND finished_at < clock_timestamp() - interval '7 days')::int AS "finishedOld",
           count(*) FILTER (WHERE state <> 'pending' AND finished_at >= clock_timestamp() - interval '7 days')::int AS "finishedNew",
           count(*) FILTER (WHERE state = 'pending')::int AS pending,
           (SELECT count(*) FROM webhook_attempts)::int AS attempts
    FROM webhook_deliveries`
  return row!
})

layer(TestWebhooks.layer(), { excludeTestServices: true })("Delivery history", (it) => {
  it.effect(
    "DeliveryHistoryIsBounded: finished deliveries older than the history's age go with their attempts, 1,000 per statement, at start and hourly by the Clock; recent and pending ones stay, however old; removing a subscription removes its history batch by batch",
    () =>
      Effect.gen(function* () {
        yield* TestClock.setTime(Date.now())
        const receiver = yield* WebhookReceiver.start(() => ({ status: 200 }))
        const sub = yield* TestWebhooks.subscribe("owner-h", receiver.url("/h"), ["h"])
        yield* history(sub.id, 1500, "delivered", 10, 0)
        yield* history(sub.id, 1000, "dead", 8, 10_000)
        yield* history(sub.id, 20, "delivered", 2, 20_000)
        yield* history(sub.id, 7, "pending", 30, 30_000)
        assert.deepStrictEqual(yield* counts, { finishedOld: 2500, finishedNew: 20, pending: 7, attempts: 5054 })

        const runs = yield* Queue.unbounded<number>()
        const { statements } = yield* counting(
          /DELETE FROM webhook_deliveries/,
          Effect.gen(function* () {
            yield* Layer.build(DeliveryHistory.layer({ age: Duration.days(7), onRun: (n) => Queue.offer(runs, n) }))
            assert.strictEqual(yield* Queue.take(runs), 2500)
          }),
        )
        assert.strictEqual(statements, 3, "1,000 + 1,000 + 500")
        assert.deepStrictEqual(yield* counts, { finishedOld: 0, finishedNew: 20, pending: 7, attempts: 54 })

        // An hour later by the Clock, the next run; the recent ones go once they are past the age.
        yield* TestClock.adjust("1 hour")
        assert.strictEqual(yield* Queue.take(runs), 0)
        const sql = yield* SqlClient.SqlClient
        yield* sql`UPDATE webhook_deliveries SET finished_at = finished_at - interval '6 days' WHERE state <> 'pending'`
        yield* TestClock.adjust("1 hour")
        assert.strictEqual(yield* Queue.take(runs), 20)

        const other = yield* TestWebhooks.subscribe("owner-h", receiver.url("/g"), ["g"])
        yield* history(other.id, 2100, "delivered", 1, 40_000)
        const removal = yield* counting(
          /DELETE FROM webhook_deliveries/,
          (yield* WebhookSubscriptions).remove(other.id),
        )
        assert.strictEqual(removal.statements, 3)
        const [left] = yield* sql<{ n: number }>`
          SELECT count(*)::int AS n FROM webhook_deliveries WHERE subscription_id = ${other.id}::uuid`
        assert.strictEqual(left!.n, 0)
      }).pipe(Effect.scoped, Effect.provide(TestClock.layer())),
  )
})
