/**
 * What other parts compose into their own statements to read the log, so that no part but `log/`
 * names its tables: the head (`event_seq`), the oldest seq kept, and reads of events by seq that are
 * bounded by time, so PostgreSQL prunes the partitions (days, and their hour leaves) to those that
 * can hold the rows instead of setting up every leaf of the log.
 *
 * Keeps true: every read of `event_log` here is bounded by the time its caller knows (unbounded only
 * where that time is unknown, NULL), except `oldestSeq`, which asks every leaf for its minimum.
 */
import type { SqlClient, Statement } from "effect/sql"
import * as EventLogPartitions from "./EventLogPartitions.ts"

/**
 * A join condition that finds the event of `e` whose time is `at` (a `timestamptz` expression,
 * exact or rounded down to the millisecond, as a JS `Date` holds it; NULL for unknown) with the
 * partition pruned: `e.seq = <seq> AND ${timeOf(sql, at)}`.
 */
export const timeOf = (sql: SqlClient.SqlClient, at: Statement.Fragment) => sql`
  e.occurred_at >= coalesce(date_trunc('milliseconds', ${at}), '-infinity')
  AND e.occurred_at < coalesce(date_trunc('milliseconds', ${at}) + interval '1 millisecond', 'infinity')`

/**
 * `timeOf` for a time known before the statement runs (a job's argument, rounded down to the
 * millisecond as a JS `Date` holds it): the millisecond's bounds as parameters. PostgreSQL then
 * prunes to the one leaf that can hold the event while it plans, even for a custom plan on a cold
 * connection, where `timeOf`'s `date_trunc` (a stable function, not folded by the planner) leaves
 * every leaf to set up.
 */
export const atTime = (sql: SqlClient.SqlClient, at: Date) => sql`
  e.occurred_at >= ${at}::timestamptz AND e.occurred_at < ${new Date(at.getTime() + 1)}::timestamptz`

/**
 * The log's head as SQL expressions, for another part's statement (the one `event_seq` row is the
 * log's own): the highest seq numbered, its epoch, and its time (`occurred_at` never passes it).
 * Read in the statement's snapshot; nothing is locked.
 */
export const headSeq = (sql: SqlClient.SqlClient) => sql`(SELECT value FROM event_seq)`
export const headEpoch = (sql: SqlClient.SqlClient) => sql`(SELECT epoch FROM event_seq)`
export const headAt = (sql: SqlClient.SqlClient) => sql`(SELECT last_at FROM event_seq)`
/** The head as one row `(seq, epoch, at)`, to join: `CROSS JOIN ${EventLog.head(sql)} AS h`. */
export const head = (sql: SqlClient.SqlClient) => sql`(SELECT value AS seq, epoch, last_at AS at FROM event_seq)`

/** The lowest seq the log still holds (NULL when empty), as an SQL expression. */
export const oldestSeq = (sql: SqlClient.SqlClient) => sql`(SELECT min(seq) FROM event_log)`

/**
 * One event as `e`, for another part's `JOIN` or `LEFT JOIN`: found by its seq and its time
 * (`timeOf`), so the read touches only the partition that can hold it, whatever the log keeps:
 * `LEFT JOIN ${EventLog.eventAt(sql, sql\`d.event_seq\`, sql\`d.event_at\`)}`. More conditions can
 * follow with `AND`.
 */
export const eventAt = (sql: SqlClient.SqlClient, seq: Statement.Fragment, at: Statement.Fragment) =>
  sql`event_log AS e ON e.seq = ${seq} AND ${timeOf(sql, at)}`

/**
 * `eventAt` over `days` (`EventLogPartitions.daysBetween`'s names; `undefined`: all of `event_log`)
 * for a statement whose window of event times is known before it runs: a prepared statement over
 * named days can keep a generic plan, where over `event_log` it is planned each time with its
 * bounds. A day detached reads as empty; one dropped fails the statement (`undefined_table`,
 * 42P01), and the caller reads again over `event_log`.
 */
export const eventIn = (
  sql: SqlClient.SqlClient,
  days: ReadonlyArray<string> | undefined,
  seq: Statement.Fragment,
  at: Statement.Fragment,
) => sql`${EventLogPartitions.source(sql, days, eventColumns)} AS e ON e.seq = ${seq} AND ${timeOf(sql, at)}`

/**
 * The day partitions that hold every time from `since` to `until`, for `eventIn`, when they are at
 * most two days (a live reader's window: the last event read, to the clock); `undefined` when the
 * window is wider or open: the read goes over `event_log`.
 */
export const daysOfWindow = (since: Date | null, until: Date | null) =>
  since === null || until === null ? undefined : EventLogPartitions.daysBetween(since, until, 2)

/** The columns of an event `eventIn` reads from named days. */
export const eventColumns = "seq, space_id, type, epoch, occurred_at, trace_parent, actor, payload"

/**
 * `eventAt` for a time known before the statement runs (`atTime`); an unknown time (a job from
 * before times were recorded) finds the event by its seq alone.
 */
export const eventAtTime = (sql: SqlClient.SqlClient, seq: Statement.Fragment, at: Date | undefined) =>
  sql`event_log AS e ON e.seq = ${seq} AND ${at === undefined || Number.isNaN(at.getTime()) ? sql`true` : atTime(sql, at)}`

/** Whether the event of `seq` at `at` is still in the log (retention has not dropped it), as SQL. */
export const holdsEvent = (sql: SqlClient.SqlClient, seq: Statement.Fragment, at: Statement.Fragment) =>
  sql`EXISTS (SELECT 1 FROM event_log AS e WHERE e.seq = ${seq} AND ${timeOf(sql, at)})`

/** A position in the log: a seq and its event's time, as text (a JS Date drops the microseconds). */
export interface Position {
  readonly seq: bigint
  readonly at: string
}

/**
 * The condition on `event_log` rows after `after` up to `head`, by seq and by time: in a statement
 * planned with these as parameters (unprepared), PostgreSQL sets up only the leaves between the two
 * times. The times as text, since a bound rounded down to the millisecond misses its event.
 */
export const between = (sql: SqlClient.SqlClient, after: Position, head: Position) =>
  sql`seq > ${after.seq} AND seq <= ${head.seq} AND occurred_at >= ${after.at}::timestamptz AND occurred_at <= ${head.at}::timestamptz`

/**
 * The age in seconds (by the server's clock) of the first event after `after` up to `head`, by
 * seq: a consumer's pending age. Planned each time with its bounds, as `readFrom` reads, so it
 * sets up only the leaves between the two times.
 */
export const firstAgeBetween = (sql: SqlClient.SqlClient, after: Position, head: Position) =>
  sql<{ age: number }>`
    SELECT extract(epoch FROM clock_timestamp() - occurred_at)::float8 AS age FROM event_log
    WHERE ${between(sql, after, head)}
    ORDER BY seq LIMIT 1`.unprepared
