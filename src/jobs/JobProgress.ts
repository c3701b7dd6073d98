/**
 * A running job's progress, for a kind whose job does many things in one run (a push batch): its
 * args rewritten to what is still to do, and, in the same statement, jobs split off it (the same
 * kind, queue, attempts and trace, their own args and time).
 *
 * What it keeps true: only the attempt that holds the job writes, compare-and-set on
 * `(id, state = 'running', attempt)`, as outcomes are. Once the job was put back (its lease lapsed,
 * the fence or a shutdown released it) or claimed again, the write changes nothing and says so, and
 * nothing is split off: a later attempt, which read the args at its claim, never has them changed
 * under it by an earlier one. The args are written before the attempt can end, so the next attempt
 * starts from what this one recorded.
 */
import { Effect, type Schema } from "effect"
import { SqlClient } from "effect/sql"
import type { JobInfo } from "./JobKind.ts"
import { insertCounts, insertCtes } from "./Jobs.ts"

/** A job split off a running one: its args and when it may run. */
export interface SplitJob {
  readonly args: Schema.Json
  readonly scheduledAt: Date
}

/**
 * Writes `args` as the job's args and inserts `split`, if the attempt `job` still holds the job.
 * `false`: it no longer does, and nothing was written.
 */
export const record = Effect.fn("JobProgress.record")(function* (
  job: Pick<JobInfo, "id" | "attempt">,
  args: Schema.Json,
  split: ReadonlyArray<SplitJob> = [],
) {
  const sql = yield* SqlClient.SqlClient
  const writeArgs = sql`
    UPDATE jobs SET args = ${JSON.stringify(args)}::jsonb
    WHERE id = ${job.id} AND state = 'running' AND attempt = ${job.attempt}
    RETURNING kind, queue, max_attempts, trace_parent`
  if (split.length === 0) return (yield* writeArgs).length > 0
  const rows = yield* sql<{ held: number }>`
    WITH held AS (${writeArgs}), ${insertCtes(
      sql,
      sql`(
        SELECT h.kind, h.queue, s.a::jsonb AS args, NULL::int2 AS priority, h.max_attempts, s.at AS scheduled_at,
               NULL::text AS unique_key, h.trace_parent
        FROM held AS h CROSS JOIN unnest(${split.map((s) => JSON.stringify(s.args))}::text[],
                                         ${split.map((s) => s.scheduledAt)}::timestamptz[]) AS s (a, at)
      )`,
    )}
    SELECT (SELECT count(*) FROM held)::int AS held, ${insertCounts(sql)}`
  return rows[0]!.held > 0
})
