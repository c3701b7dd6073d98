/**
 * Claiming runnable jobs of one queue, in one statement: the next `limit` rows in (priority,
 * scheduled time, id) order over the partial index of runnable rows, skipping rows another worker
 * holds, turned `running` with their attempt counted and the claiming worker recorded.
 *
 * Only the kinds the worker runs are claimed, so workers of different versions (or roles) can share
 * a queue without failing each other's jobs. `now` comes from the caller's `Clock` rather than the
 * database's, so that tests drive retries and scheduled jobs with `TestClock`.
 *
 * The locked ids are updated through the primary key (`id = ANY(ARRAY(...))`), not joined: as a
 * join, a large claim on a table full of finished rows was planned as a hash join over a
 * sequential scan of the whole table (7.5 ms for 510 of 22,000 rows, and growing with the table).
 *
 * A claim commits without waiting for its WAL to reach the disk: the statement turns
 * `synchronous_commit` off for its own transaction (`set_config(..., true)`; the `unflushed` CTE is
 * referenced so that it runs), which takes a WAL flush (0.3 ms to several under load) out of the
 * path from a job's insert to its start and out of every claim round trip. What that gives up,
 * only when the PostgreSQL server itself crashes (not a worker):
 * - claims committed in the last moments before the crash (up to about three `wal_writer_delay`,
 *   600 ms by default) are lost: those jobs are runnable again, their attempt not counted, and run
 *   again, as the jobs of a crashed worker do. Nothing is lost or stuck: the job's own writes and
 *   every outcome commit synchronously, and any synchronous commit flushes the claims before it.
 * - an outcome of an attempt whose claim was lost still finds the row if the job was claimed
 *   again with the same attempt number, and applies to it. It is a real outcome of a run of that
 *   job, so the compare-and-set still never loses one; the job may run once more.
 * Outcomes stay synchronous on purpose: a completion lost that way would leave its row `running`
 * under a live lease, never rescued.
 */
import { type Array as Arr, Effect } from "effect"
import { SqlClient } from "effect/sql"

export interface ClaimedJob {
  readonly id: bigint
  readonly kind: string
  readonly queue: string
  readonly args: unknown
  readonly attempt: number
  readonly maxAttempts: number
  /** Attempts spent and failed before this one (snoozes and releases spend none). */
  readonly failedBefore: number
  readonly createdAt: Date
  readonly attemptedAt: Date
  readonly traceParent: string | null
}

export const claim = Effect.fnUntraced(function* (
  queue: string,
  kinds: Arr.NonEmptyReadonlyArray<string>,
  limit: number,
  worker: string,
  now: Date,
) {
  const sql = yield* SqlClient.SqlClient
  // `now` has milliseconds and `scheduled_at` microseconds: a job inserted in the same millisecond
  // as the claim (its NOTIFY can arrive that fast) is due within it, not skipped until the poll.
  const dueBefore = new Date(now.getTime() + 1)
  return yield* sql<ClaimedJob>`
    WITH unflushed AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true) AS setting),
    next AS (
      SELECT id FROM jobs
      WHERE queue = ${queue} AND state IN ('available', 'scheduled', 'retryable') AND scheduled_at < ${dueBefore}
        AND kind IN ${sql.in(kinds)}
      ORDER BY priority, scheduled_at, id
      LIMIT ${limit}
      FOR UPDATE SKIP LOCKED
    )
    UPDATE jobs SET state = 'running', attempt = jobs.attempt + 1, attempted_at = clock_timestamp(),
                    attempted_by = ${worker}
    WHERE jobs.id = ANY (ARRAY(SELECT id FROM next)) AND (SELECT setting FROM unflushed) = 'off'
    RETURNING jobs.id, jobs.kind, jobs.queue, jobs.args, jobs.attempt, jobs.max_attempts AS "maxAttempts",
              (SELECT count(*) FROM jsonb_array_elements(jobs.errors) AS e WHERE e ->> 'kind' <> 'interrupted')::int
                AS "failedBefore",
              jobs.created_at AS "createdAt", jobs.attempted_at AS "attemptedAt", jobs.trace_parent AS "traceParent"`
})
