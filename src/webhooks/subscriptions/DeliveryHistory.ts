/**
 * Bounds the delivery history: delivered and dead deliveries, with their attempts (each keeps up to
 * 20 KB of response body), are removed once they finished longer ago than the history's age
 * (`webhook.history_retention`, by default `sync.event_retention`), timed by `Clock`. Pending
 * deliveries are never removed by age.
 *
 * Always in bounded batches, each its own statement: a large history never becomes one long
 * transaction holding locks on the subscription's rows, and removing a subscription removes its
 * history batch by batch before the subscription itself.
 */
import { Clock, Duration, Effect, Layer, Schedule } from "effect"
import { SqlClient } from "effect/sql"

/** Deliveries per statement (their attempts go with them). */
export const batchSize = 1000

/** Runs `statement` (which removes at most `batchSize` rows and says how many) until a batch is short; the total. */
const inBatches = <E, R>(statement: Effect.Effect<ReadonlyArray<{ readonly n: number }>, E, R>) =>
  Effect.gen(function* () {
    let removed = 0
    for (;;) {
      const n = (yield* statement)[0]?.n ?? 0
      removed += n
      if (n < batchSize) return removed
    }
  })

/** Removes the finished deliveries that finished before now − `age`; how many. */
export const removeFinished = Effect.fn("DeliveryHistory.removeFinished")(function* (age: Duration.Duration) {
  const sql = yield* SqlClient.SqlClient
  const cutoff = new Date((yield* Clock.currentTimeMillis) - Duration.toMillis(age)).toISOString()
  return yield* inBatches(sql<{ n: number }>`
    WITH doomed AS (
      SELECT id FROM webhook_deliveries
      WHERE state <> 'pending' AND finished_at < ${cutoff}::timestamptz
      ORDER BY finished_at LIMIT ${batchSize} FOR UPDATE SKIP LOCKED
    ), gone AS (DELETE FROM webhook_deliveries AS d USING doomed WHERE d.id = doomed.id RETURNING 1)
    SELECT count(*)::int AS n FROM gone`)
})

/** Removes every delivery of a subscription, pending ones too (the subscription is going). */
export const removeAllOf = Effect.fn("DeliveryHistory.removeAllOf")(function* (subscriptionId: string) {
  const sql = yield* SqlClient.SqlClient
  return yield* inBatches(sql<{ n: number }>`
    WITH doomed AS (
      SELECT id FROM webhook_deliveries WHERE subscription_id = ${subscriptionId}::uuid LIMIT ${batchSize}
    ), gone AS (DELETE FROM webhook_deliveries AS d USING doomed WHERE d.id = doomed.id RETURNING 1)
    SELECT count(*)::int AS n FROM gone`)
})

/** How often the worker bounds the history. */
export const interval = Duration.hours(1)

/** `removeFinished` at start and every `interval` (by `Clock`); `onRun` hears each count (tests wait on it). */
export const layer = (options: {
  readonly age: Duration.Duration
  readonly onRun?: (removed: number) => Effect.Effect<void>
}) =>
  Layer.effectDiscard(
    removeFinished(options.age).pipe(
      Effect.tap((n) =>
        n > 0
          ? Effect.logInfo(`webhooks: removed ${n} finished deliveries older than ${Duration.format(options.age)}`)
          : Effect.void,
      ),
      Effect.tap((n) => options.onRun?.(n) ?? Effect.void),
      Effect.catchCause((cause) => Effect.logError("webhooks: bounding the delivery history failed", cause)),
      Effect.repeat(Schedule.spaced(interval)),
      Effect.forkScoped,
    ),
  )
