/**
 * Keeps `event_log` partitions created ahead of time. There is no default partition, so an append
 * on a day without one fails; the worker makes sure that never happens by running `ensure` at start
 * and every hour. (Retention, which detaches old partitions, is a separate concern.)
 */
import { Duration, Effect, Layer, Schedule } from "effect"
import { SqlClient } from "effect/sql"
import * as SqlInterval from "../platform/SqlInterval.ts"

/** How far ahead partitions exist after `ensure`. */
export const runway = Duration.days(14)

/** Creates missing daily partitions from today through `ahead`; returns how many it created. */
export const ensure = Effect.fn("EventLogPartitions.ensure")(function* (ahead: Duration.Duration = runway) {
  const sql = yield* SqlClient.SqlClient
  const [row] = yield* sql<{ created: number }>`
    SELECT event_log_ensure_partitions(${SqlInterval.millis(sql, Duration.toMillis(ahead))}) AS created`
  return row?.created ?? 0
})

/** Runs `ensure` now and then hourly for the layer's lifetime. */
export const maintain = Layer.effectDiscard(
  ensure().pipe(
    Effect.tap((created) => (created > 0 ? Effect.logInfo(`created ${created} event_log partitions`) : Effect.void)),
    Effect.catchCause((cause) => Effect.logError("event_log partition maintenance failed", cause)),
    Effect.repeat(Schedule.spaced(Duration.hours(1))),
    Effect.forkScoped,
  ),
)
