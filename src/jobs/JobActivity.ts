/**
 * How many jobs of some kinds finished in each minute since a time, by how they ended (completed,
 * cancelled, discarded), for the console's overview. Read through the `jobs_finalized` index, so
 * the read is the window's finished jobs, not the table.
 */
import type { SqlClient } from "effect/sql"
import * as MinuteBuckets from "../platform/MinuteBuckets.ts"

export interface FinishedInMinute {
  /** The minute's start, in Unix seconds. */
  readonly minute: number
  readonly state: "completed" | "cancelled" | "discarded"
  readonly count: number
}

/** Jobs of `kinds` finalized per minute and end state since `since` (empty minutes are absent). */
export const finishedPerMinute = (sql: SqlClient.SqlClient, kinds: ReadonlyArray<string>, since: Date) =>
  sql<FinishedInMinute>`
    SELECT ${MinuteBuckets.startOf(sql, sql`finalized_at`)} AS minute, state::text AS state,
           count(*)::int AS count
    FROM jobs WHERE finalized_at >= ${since}::timestamptz AND kind IN ${sql.in(kinds)}
    GROUP BY 1, 2 ORDER BY 1`
