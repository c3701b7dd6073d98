/**
 * Per-minute counts, as the console's overview charts them: a row's minute is the start of the
 * minute its time falls in, in Unix seconds. Every part that counts by the minute buckets the same
 * way, so the overview can line their rows up with its own minutes (whole seconds, numbers in JS).
 */
import type { SqlClient, Statement } from "effect/sql"

/**
 * The start of the minute `time` (a `timestamptz` expression) falls in, in Unix seconds. A
 * `float8`, not `extract`'s `numeric`: the driver hands it over as a number, not as text, so it
 * equals the overview's own minute starts as a `Map` key.
 */
export const startOf = (sql: SqlClient.SqlClient, time: Statement.Fragment) =>
  sql`extract(epoch FROM date_trunc('minute', ${time}))::float8`
