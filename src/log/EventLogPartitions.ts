/**
 * `event_log` partitions created ahead of time. There is no default partition, so an append on a
 * day without one fails; the worker's `Retention` runs make sure that never happens (at start and
 * every hour, by its `Clock`), and `ensure` is the same for a host app that runs no worker.
 */
import { Duration, Effect } from "effect"
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

/** The name of the day partition that holds `at` (UTC days, as `event_log_ensure_partitions` names them). */
export const dayName = (at: Date): string => `event_log_${at.toISOString().slice(0, 10).replaceAll("-", "")}`

/**
 * The day partitions that hold `since` through `until`, oldest first; `undefined` when that is
 * more than `most` days (or `until` is before `since`).
 */
export const daysBetween = (since: Date, until: Date, most: number): ReadonlyArray<string> | undefined => {
  const dayMillis = 86_400_000
  const first = Math.floor(since.getTime() / dayMillis)
  const last = Math.floor(until.getTime() / dayMillis)
  if (last < first || last - first >= most) return undefined
  return Array.from({ length: last - first + 1 }, (_, k) => dayName(new Date((first + k) * dayMillis)))
}
