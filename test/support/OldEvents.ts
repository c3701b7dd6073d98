/**
 * Events with explicit times, for tests of retention: appended through the counter as
 * `EventLog.append` does (same lock, gapless, `last_at` kept), but at the times given, which must
 * not decrease. The day partitions for those times must exist (`days`).
 */
import { Duration, Effect } from "effect"
import { SqlClient } from "effect/sql"
import * as OldEvents from "../../chaos/OldEvents.ts"

export const dayMillis = Duration.toMillis(Duration.days(1))

/** Creates the day partitions from `from` through `days` days later. */
export const days = (from: number, days: number) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) =>
      sql`SELECT event_log_ensure_partitions(${new Date(from).toISOString()}::timestamptz, make_interval(days => ${days}))`,
  )

/** Appends one event per time, in `space`; returns their seqs. */
export const appendAt = (times: ReadonlyArray<number>, space = "old") => OldEvents.appendAt(times, space, "someone")
