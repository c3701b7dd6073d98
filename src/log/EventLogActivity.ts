/**
 * How many events the log numbered in each minute since a time, for the console's overview.
 * `occurred_at` is the time an event was numbered (taken under the append lock, or by the sequencer
 * in `post_commit` mode), so counting by it counts appends as they were sequenced.
 *
 * Keeps true: the read is bounded below by a time passed as a parameter and planned with it
 * (unprepared), so PostgreSQL prunes to the hour leaves that can hold the rows (two for the last
 * hour), whatever the log keeps.
 */
import type { SqlClient } from "effect/sql"
import * as MinuteBuckets from "../platform/MinuteBuckets.ts"

export interface MinuteCount {
  /** The minute's start, in Unix seconds. */
  readonly minute: number
  readonly count: number
}

/** Events numbered per minute since `since` (minutes without events are absent). */
export const perMinute = (sql: SqlClient.SqlClient, since: Date) =>
  sql<MinuteCount>`
    SELECT ${MinuteBuckets.startOf(sql, sql`occurred_at`)} AS minute, count(*)::int AS count
    FROM event_log WHERE occurred_at >= ${since}::timestamptz
    GROUP BY 1 ORDER BY 1`.unprepared
