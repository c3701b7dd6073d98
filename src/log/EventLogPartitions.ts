/**
 * `event_log` partitions created ahead of time. There is no default partition, so an append on a
 * day without one fails; the worker's `Retention` runs make sure that never happens (at start and
 * every hour, by its `Clock`), and `ensure` is the same for a host app that runs no worker.
 */
import { Duration, Effect } from "effect"
import { SqlClient, type Statement } from "effect/sql"
import * as SqlInterval from "../platform/SqlInterval.ts"

/** How far ahead partitions exist after `ensure`. */
export const runway = Duration.days(14)

/** Creates missing daily partitions from today through `ahead`; returns how many it created. */
export const ensure = Effect.fn("EventLogPartitions.ensure")(function* (ahead: Duration.Duration = runway) {
  const sql = yield* SqlClient.SqlClient
  const [row] = yield* sql<{ created: number }>`
    SELECT event_log_ensure_partitions(${SqlInterval.millis(sql, Duration.toMillis(ahead))}) AS created`
  return row?.created ?? 0
})

/**
 * How a day partition is named: `event_log_YYYYMMDD`, the UTC day it holds. `event_log_ensure_partitions`
 * (migration 0017, never edited) makes them so in SQL; here the format lives once for bothy's
 * own code: `dayName` writes it, `dayOf` reads it in SQL.
 */
const dayPrefix = "event_log_"
/** A day partition's name, as a POSIX regular expression capturing its `YYYYMMDD`. */
const dayPattern = `^${dayPrefix}([0-9]{8})$`

/** The name of the day partition that holds `at` (UTC days, as `event_log_ensure_partitions` names them). */
export const dayName = (at: Date): string => `${dayPrefix}${at.toISOString().slice(0, 10).replaceAll("-", "")}`

/**
 * The UTC day (an SQL `date`) that the relation named `name` (an SQL expression) holds as a day
 * partition of the log; NULL for any other name.
 * @internal
 */
export const dayOf = (sql: SqlClient.SqlClient, name: Statement.Fragment) =>
  sql`to_date(substring(${name}::text FROM ${dayPattern}::text), 'YYYYMMDD')`

/**
 * `SELECT day`: the days of the partitions attached to the log now, one row each, in no order
 * (for another part's report: the runway, the oldest day kept).
 * @internal
 */
export const attachedDays = (sql: SqlClient.SqlClient) => sql`
  SELECT ${dayOf(sql, sql`c.relname`)} AS day
  FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid
  WHERE i.inhparent = 'event_log'::regclass`

/**
 * What a read of the log's `columns` reads from: `event_log`, or with `days` (`daysBetween`'s
 * names) those day partitions alone, by name, as one relation. A day that is detached, or pending
 * detach, reads as empty, as `event_log` reads it; one dropped fails the statement
 * (`undefined_table`). Naming the days lets a prepared statement's generic plan skip setting up
 * every leaf of the log (see `StatementRound`).
 * @internal
 */
export const source = (
  sql: SqlClient.SqlClient,
  days: ReadonlyArray<string> | undefined,
  columns: string,
): Statement.Fragment => {
  if (days === undefined) return sql`event_log`
  const branches = days.map(
    (day) => sql`
      SELECT ${sql.literal(columns)} FROM ${sql(day)} WHERE ${attached(sql, day)}`,
  )
  return sql`(${sql.join(" UNION ALL ", false)(branches)})`
}

/** Whether the day partition `day` is attached to the log and not pending detach, as SQL (NULL: not a partition of it). */
const attached = (sql: SqlClient.SqlClient, day: string) => sql`(
  SELECT NOT i.inhdetachpending FROM pg_inherits AS i
  WHERE i.inhrelid = ${sql.literal(`'${day}'::regclass`)} AND i.inhparent = 'event_log'::regclass
)`

/**
 * How the day that holds a time is laid out: split into hour leaves (every day created since
 * migration 0017), or whole (a day created before it, and the day an install first migrated).
 * @internal
 */
export type DayForm = "hours" | "whole"

/**
 * The leaf that holds `at` in a day of `form`: its hour leaf, or the whole day.
 * @internal
 */
export const leafName = (at: Date, form: DayForm): string =>
  form === "whole" ? dayName(at) : `${dayName(at)}_h${at.toISOString().slice(11, 13)}`

/**
 * `source` for the one leaf that holds `at`, by name: a statement over it has no partitions to
 * prune, so its generic plan is its custom plan. A leaf whose day is detached, or pending detach,
 * reads as empty; one that does not exist (the day is of the other form, or dropped) fails the
 * statement (`undefined_table`).
 * @internal
 */
export const leafSource = (sql: SqlClient.SqlClient, at: Date, form: DayForm, columns: string): Statement.Fragment =>
  sql`(SELECT ${sql.literal(columns)} FROM ${sql(leafName(at, form))} WHERE ${attached(sql, dayName(at))})`

/**
 * The day partitions that hold `since` through `until`, oldest first; `undefined` when that is
 * more than `most` days (or `until` is before `since`).
 */
export const daysBetween = (since: Date, until: Date, most: number): ReadonlyArray<string> | undefined => {
  const dayMillis = 86_400_000
  const first = Math.floor(since.getTime() / dayMillis)
  const last = Math.floor(until.getTime() / dayMillis)
  if (last < first || last - first >= most) return undefined
  return Array.from({ length: last - first + 1 }, (_, k) => dayName(new Date((first + k) * dayMillis)))
}
