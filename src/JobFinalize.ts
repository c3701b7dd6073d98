/**
 * Recording what became of claimed jobs, many at once, and only as compare-and-set: a row changes
 * only while it is still `running` the same attempt that produced the outcome. A worker that lost
 * its job (its lease expired and the job was rescued, re-claimed, or finished elsewhere) changes
 * nothing, so a stale outcome can never overwrite a newer one (River shipped that race: river#1302).
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

/** Applies the outcomes in one statement; returns the ids that were still theirs to change. */
export const finalize = Effect.fnUntraced(function* (batch: ReadonlyArray<Finished>) {
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
  const updated = yield* sql<{ id: bigint }>`
    UPDATE jobs SET
      state = d.s::job_state,
      scheduled_at = coalesce(d.at, jobs.scheduled_at),
      finalized_at = CASE WHEN d.s IN ('completed', 'cancelled', 'discarded') THEN clock_timestamp() END,
      max_attempts = jobs.max_attempts + d.g,
      errors = CASE WHEN d.e IS NULL THEN jobs.errors ELSE jobs.errors || jsonb_build_array(d.e) END
    FROM jsonb_to_recordset(${rows}::jsonb) AS d(id bigint, n smallint, s text, at timestamptz, e jsonb, g smallint)
    WHERE jobs.id = d.id AND jobs.state = 'running' AND jobs.attempt = d.n
    RETURNING jobs.id`
  return new Set(updated.map((r) => r.id))
})
