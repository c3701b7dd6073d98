/**
 * Recording what became of claimed jobs, many at once, and only as compare-and-set: a row changes
 * only while it is still `running` the same attempt that produced the outcome. A worker that lost
 * its job (its lease expired and the job was rescued, re-claimed, or finished elsewhere) changes
 * nothing, so a stale outcome can never overwrite a newer one (River shipped that race: river#1302).
 *
 * A completed job is deleted at once, as graphile-worker does, unless it carries a `unique_key`:
 * the history that matters lives in the tables the job wrote (the delivery tables), and keeping
 * the row would cost a second new row version with its index entries now, and a DELETE by the
 * cleaner later, for nothing anyone reads. A job with a `unique_key` stays `completed` until the
 * cleaner removes it after `completedRetention`: its row is what turns a duplicate insert into a
 * no-op (the consumers' second line of defence), so it must outlive the job for a while.
 * Cancelled, discarded and every not-final outcome update the row, which keeps its `errors`.
 *
 * The completion of a deleted row is still compare-and-set (`state = 'running' AND attempt = n`),
 * and a stale outcome for a row that is gone finds nothing, so it changes nothing either.
 */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"

/** What an attempt left behind on the row's `errors`. */
export interface AttemptError {
  readonly attempt: number
  readonly at: string
  readonly kind: "failure" | "defect" | "timeout" | "cancelled" | "bad_args" | "interrupted" | "rescued"
  readonly message: string
}

export type Outcome =
  | { readonly _tag: "Completed" }
  /** Never runs again. */
  | { readonly _tag: "Cancelled"; readonly error: AttemptError }
  | { readonly _tag: "Discarded"; readonly error: AttemptError }
  /** Runs again at `at`, the failed attempt spent. */
  | { readonly _tag: "Retry"; readonly at: Date; readonly error: AttemptError }
  /** Runs again at `at` without spending an attempt. */
  | { readonly _tag: "Snooze"; readonly at: Date }
  /** Put back for another worker (shutdown interrupted it) without spending an attempt. */
  | { readonly _tag: "Release"; readonly at: Date; readonly error: AttemptError }

export interface Finished {
  readonly id: bigint
  readonly attempt: number
  readonly outcome: Outcome
}

const stateOf: Record<Outcome["_tag"], string> = {
  Completed: "completed",
  Cancelled: "cancelled",
  Discarded: "discarded",
  Retry: "retryable",
  Snooze: "scheduled",
  Release: "available",
}

/** Completions: deleted, or kept as `completed` where a unique key must outlive the job. */
const complete = Effect.fnUntraced(function* (done: ReadonlyArray<Finished>) {
  const sql = yield* SqlClient.SqlClient
  const ids = `{${done.map((f) => f.id).join(",")}}`
  const attempts = JSON.stringify(Object.fromEntries(done.map((f) => [String(f.id), f.attempt])))
  // Planned to touch only the batch's rows, whatever the statistics say:
  // - the rows are found through the primary key (`id = ANY`), and each one's attempt is looked
  //   up in a JSON object rather than joined (as a join, a generic plan compared every row with
  //   every outcome); the object is parsed once, in `batch` (as a bare parameter it was parsed
  //   again for every row);
  // - the state is compared as text, so that `jobs_running` (whose statistics, taken while
  //   nothing ran, promise one row) is never chosen: scanned whole per statement, it made each
  //   completion slower as claimed jobs piled up (2 s for 1,000 of 20,000 running);
  // - `kept` looks only at the ids `gone` did not delete (none, in the usual batch) and needs no
  //   test of `unique_key`: a row without one that `gone` left failed the same compare-and-set.
  //   Testing it would let the planner scan `jobs_unique_key`, every kept row, per statement.
  const rows = yield* sql<{ id: bigint }>`
    WITH batch AS MATERIALIZED (
      SELECT ${ids}::bigint[] AS ids, ${attempts}::jsonb AS attempts
    ), gone AS (
      DELETE FROM jobs
      WHERE id = ANY ((SELECT ids FROM batch)::bigint[]) AND state::text = 'running' AND unique_key IS NULL
        AND attempt = ((SELECT attempts FROM batch) ->> id::text)::smallint
      RETURNING id
    ), kept AS (
      UPDATE jobs SET state = 'completed', finalized_at = clock_timestamp()
      WHERE id = ANY (ARRAY(SELECT unnest(ids) FROM batch EXCEPT ALL SELECT id FROM gone))
        AND state::text = 'running' AND attempt = ((SELECT attempts FROM batch) ->> id::text)::smallint
      RETURNING id
    )
    SELECT id FROM gone UNION ALL SELECT id FROM kept`
  return rows
})

/** Every other outcome: the row stays, with its new state and the attempt's error. */
const update = Effect.fnUntraced(function* (batch: ReadonlyArray<Finished>) {
  const sql = yield* SqlClient.SqlClient
  const rows = JSON.stringify(
    batch.map(({ id, attempt, outcome }) => ({
      id: id.toString(),
      n: attempt,
      s: stateOf[outcome._tag],
      at: "at" in outcome ? outcome.at.toISOString() : null,
      e: "error" in outcome ? outcome.error : null,
      // Snooze and release give the attempt back by raising the ceiling: `attempt` only ever grows,
      // which keeps the compare-and-set sound.
      g: outcome._tag === "Snooze" || outcome._tag === "Release" ? 1 : 0,
    })),
  )
  // A row that is runnable at once (released, snoozed or retried without delay) wakes its queue's
  // workers on commit, as an insert does; without it, it would wait for their poll.
  return yield* sql<{ id: bigint }>`
    WITH changed AS (
      UPDATE jobs SET
        state = d.s::job_state,
        scheduled_at = coalesce(d.at, jobs.scheduled_at),
        finalized_at = CASE WHEN d.s IN ('cancelled', 'discarded') THEN clock_timestamp() END,
        max_attempts = jobs.max_attempts + d.g,
        errors = CASE WHEN d.e IS NULL THEN jobs.errors ELSE jobs.errors || jsonb_build_array(d.e) END
      FROM jsonb_to_recordset(${rows}::jsonb) AS d(id bigint, n smallint, s text, at timestamptz, e jsonb, g smallint)
      WHERE jobs.id = d.id AND jobs.state = 'running' AND jobs.attempt = d.n
      RETURNING jobs.id, jobs.queue, jobs.state, jobs.scheduled_at
    ), wake AS MATERIALIZED (
      SELECT pg_notify('jobs', queue) FROM (
        SELECT DISTINCT queue FROM changed
        WHERE state IN ('available', 'scheduled', 'retryable') AND scheduled_at <= clock_timestamp()
      ) AS due
    )
    SELECT id FROM changed WHERE (SELECT count(*) FROM wake) >= 0`
})

/**
 * Applies the outcomes: one statement when they are all completions (the usual batch) or none
 * is, two otherwise. Returns the ids that were still theirs to change.
 */
export const finalize = Effect.fnUntraced(function* (batch: ReadonlyArray<Finished>) {
  const done: Array<Finished> = []
  const rest: Array<Finished> = []
  for (const f of batch) (f.outcome._tag === "Completed" ? done : rest).push(f)
  const applied = new Set<bigint>()
  if (done.length > 0) for (const r of yield* complete(done)) applied.add(r.id)
  if (rest.length > 0) for (const r of yield* update(rest)) applied.add(r.id)
  return applied
})
