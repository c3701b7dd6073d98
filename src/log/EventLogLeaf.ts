/**
 * A read of one event whose time is known before the statement runs (a push job's `at`) from the
 * one leaf of the log that holds it, named in the statement's text.
 *
 * Why: a prepared statement over `event_log` is planned afresh on every execution, since its
 * generic plan would set up every leaf of the log and lose to a custom plan pruned to one. Planning
 * the push batch's read (its registrations and rights beside the event) cost 0.9 ms of the
 * backend's CPU a job in the push benchmark at 200 events/s, nine times its execution. Over a
 * named leaf there is nothing to prune, so PostgreSQL keeps the generic plan after five executions
 * and plans no more.
 *
 *   the day's form as last found (split into hours unless found whole) ──> the statement over its leaf
 *     no such table (42P01): the day is whole ──> over the day; no such table: it was dropped ──>
 *     over `event_log`, as before
 *
 * Keeps true: the event read is the one `event_log` holds, whatever the form found: a leaf whose
 * day is detached, or pending detach, reads as empty (`EventLogPartitions.leafSource`), and a
 * wrong guess of the form only costs the statement that fails.
 */
import { Effect } from "effect"
import type { SqlClient, Statement } from "effect/sql"
import type { SqlError } from "effect/sql/SqlError"
import { LruCache } from "../platform/LruCache.ts"
import { pgFailure } from "../platform/PgError.ts"
import * as EventLogPartitions from "./EventLogPartitions.ts"
import { atTime, eventAtTime, eventColumns } from "./EventLogReads.ts"

/** Where a read goes: the leaf of a day of that form, or `event_log` itself. */
export type Where = EventLogPartitions.DayForm | "log"

/** The forms found so far, by day: a day's form never changes while it is kept. */
export class Leaves {
  readonly forms = new LruCache<string, Where>(64)
}

const after: Record<EventLogPartitions.DayForm, Where> = { hours: "whole", whole: "log" }

/** The event of `seq` at `at` as `e`, for a `LEFT JOIN`, read from `where`. */
export const eventFrom = (sql: SqlClient.SqlClient, where: Where, seq: Statement.Fragment, at: Date) =>
  where === "log"
    ? eventAtTime(sql, seq, at)
    : sql`${EventLogPartitions.leafSource(sql, at, where, eventColumns)} AS e ON e.seq = ${seq} AND ${atTime(sql, at)}`

/** Whether `error` says the leaf `name` does not exist (and not some other relation). */
const missing = (error: SqlError, name: string) => {
  const { code, message } = pgFailure(error)
  return code === "42P01" && message.includes(`"${name}"`)
}

/**
 * Runs `statement` with the join that finds the event of `at` (`eventFrom`), from its leaf when the
 * time is known, moving on to the next place to look when the leaf named does not exist.
 */
export const read = <A, R>(
  sql: SqlClient.SqlClient,
  leaves: Leaves,
  at: Date | undefined,
  statement: (event: (seq: Statement.Fragment) => Statement.Fragment) => Effect.Effect<A, SqlError, R>,
): Effect.Effect<A, SqlError, R> => {
  if (at === undefined || Number.isNaN(at.getTime())) return statement((seq) => eventAtTime(sql, seq, at))
  const day = EventLogPartitions.dayName(at)
  const from = (where: Where): Effect.Effect<A, SqlError, R> => {
    const run = statement((seq) => eventFrom(sql, where, seq, at))
    if (where === "log") return run
    return Effect.catchIf(
      run,
      (e) => missing(e, EventLogPartitions.leafName(at, where)),
      () => from(leaves.forms.set(day, after[where])),
    )
  }
  return from(leaves.forms.get(day) ?? "hours")
}
