/**
 * A duration as an SQL `interval`, bound as a number rather than spelled into a string: the
 * statement's text stays the same whatever the value (one prepared plan), and nothing is parsed
 * from text that a caller built.
 */
import type { SqlClient } from "effect/sql"

export const millis = (sql: SqlClient.SqlClient, ms: number) => sql`make_interval(secs => ${ms / 1000}::float8)`
