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
 *
 * An error's text comes from whatever the job failed with, so it is made storable before it goes
 * out (NUL and unpaired surrogates, which `jsonb` refuses and which would fail the whole statement,
 * become U+FFFD) and capped at `maxErrorMessageLength`. An outcome the database still refuses is
 * what `placeholder` is for (see `JobCompleter`).
 */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"
import { storable } from "../platform/StorableText.ts"
import * as Jobs from "./Jobs.ts"

/** What an attempt left behind on the row's `errors`. */
export interface AttemptError {
  readonly attempt: number
  readonly at: string
  readonly kind:
    | "failure"
    | "defect"
    | "timeout"
    | "cancelled"
    | "bad_args"
    | "interrupted"
    | "rescued"
    | "unrecordable"
  readonly message: string
}

/**
 * UTF-16 code units of an error's message that are kept: 25 attempts of a failing job then add up
 * to about 100 KiB of `errors`, which every later outcome of the job rewrites.
 */
export const maxErrorMessageLength = 4096

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
        AND attempt = ((SELECT attempts FROM batch) ->> id::text)::int
      RETURNING id
    ), kept AS (
      UPDATE jobs SET state = 'completed', finalized_at = clock_timestamp()
      WHERE id = ANY (ARRAY(SELECT unnest(ids) FROM batch EXCEPT ALL SELECT id FROM gone))
        AND state::text = 'running' AND attempt = ((SELECT attempts FROM batch) ->> id::text)::int
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
      e:
        "error" in outcome
          ? { ...outcome.error, message: storable(outcome.error.message, maxErrorMessageLength) }
          : null,
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
      FROM jsonb_to_recordset(${rows}::jsonb) AS d(id bigint, n int, s text, at timestamptz, e jsonb, g int)
      WHERE jobs.id = d.id AND jobs.state = 'running' AND jobs.attempt = d.n
      RETURNING jobs.id, jobs.queue, jobs.state, jobs.scheduled_at
    ), wake AS MATERIALIZED (
      SELECT pg_notify(${Jobs.channel}, queue) FROM (
        SELECT DISTINCT queue FROM changed
        WHERE state IN ('available', 'scheduled', 'retryable') AND scheduled_at <= clock_timestamp()
      ) AS due
    )
    SELECT id FROM changed WHERE (SELECT count(*) FROM wake) >= 0`
})

/** The groups a batch is written in, each by one statement: its completions, and every other outcome. */
export const byStatement = (batch: ReadonlyArray<Finished>): ReadonlyArray<ReadonlyArray<Finished>> => {
  const done: Array<Finished> = []
  const rest: Array<Finished> = []
  for (const f of batch) (f.outcome._tag === "Completed" ? done : rest).push(f)
  return [done, rest].filter((group) => group.length > 0)
}

/**
 * Writes one group of `byStatement` (or any part of one) in one statement. Returns the ids that
 * were still theirs to change.
 */
export const write = Effect.fnUntraced(function* (group: ReadonlyArray<Finished>) {
  const rows = group[0]?.outcome._tag === "Completed" ? yield* complete(group) : yield* update(group)
  return new Set(rows.map((r) => r.id))
})

/**
 * Applies the outcomes: one statement when they are all completions (the usual batch) or none
 * is, two otherwise. Returns the ids that were still theirs to change.
 */
export const finalize = Effect.fnUntraced(function* (batch: ReadonlyArray<Finished>) {
  const applied = new Set<bigint>()
  for (const group of byStatement(batch)) for (const id of yield* write(group)) applied.add(id)
  return applied
})

/**
 * Records `finished` without any of its outcome's data, for an outcome the database refused (its
 * time out of range, its error, giving its attempt back past `integer`, whatever it was): a final
 * outcome keeps its state (a completion keeps the row, as `completed`); any other makes the job
 * `retryable` at once, or `discarded` when its attempts are spent, which is what a rescue does. Its
 * `errors` get an `unrecordable` entry that says what was refused and why. Compare-and-set like
 * every outcome; returns the state written, or undefined when the job was no longer this attempt's.
 */
export const placeholder = Effect.fnUntraced(function* (finished: Finished, reason: string) {
  const sql = yield* SqlClient.SqlClient
  const { id, attempt, outcome } = finished
  const final = outcome._tag === "Completed" || outcome._tag === "Cancelled" || outcome._tag === "Discarded"
  const kept = final ? stateOf[outcome._tag] : null
  const message = storable(`the ${outcome._tag} outcome could not be recorded: ${reason}`, maxErrorMessageLength)
  const [row] = yield* sql<{ state: string }>`
    WITH changed AS (
      UPDATE jobs SET
        state = coalesce(${kept}::text,
                         CASE WHEN attempt >= max_attempts THEN 'discarded' ELSE 'retryable' END)::job_state,
        scheduled_at = CASE WHEN ${kept}::text IS NULL THEN clock_timestamp() ELSE scheduled_at END,
        finalized_at = CASE WHEN ${kept}::text IS NOT NULL OR attempt >= max_attempts
                       THEN clock_timestamp() END,
        errors = errors || jsonb_build_array(jsonb_build_object(
          'attempt', attempt, 'at', clock_timestamp(), 'kind', 'unrecordable', 'message', ${message}::text))
      WHERE id = ${id} AND state = 'running' AND attempt = ${attempt}
      RETURNING queue, state
    ), wake AS MATERIALIZED (
      SELECT pg_notify(${Jobs.channel}, queue) FROM changed WHERE state = 'retryable'
    )
    SELECT state::text FROM changed WHERE (SELECT count(*) FROM wake) >= 0`
  return row?.state
})
