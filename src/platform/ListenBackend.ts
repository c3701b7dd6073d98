/**
 * The backend behind a LISTEN connection, as other processes can look it up in
 * `pg_stat_activity`: its pid and start time, or none when a pooler stands in between (the pid the
 * connection got at start-up is the pooler's key, not the backend's, and the pooler's server
 * connections outlive their clients, so no backend stands for this process).
 */
import type { PgConnection } from "@effect/sql-pg"
import { Effect, Option } from "effect"

/**
 * A PostgreSQL backend as `pg_stat_activity` shows it: its pid and when it started (ISO 8601 in
 * UTC, to the microsecond, as PostgreSQL keeps it), which together never name another backend.
 */
export interface Backend {
  readonly pid: number
  readonly started: string
}

/** The connection's backend as `pg_stat_activity` shows it; none when the pid is not the start-up one (a pooler). */
export const backendOf = (connection: PgConnection.PgConnection) =>
  connection
    .query(
      `SELECT pid, to_char(backend_start AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS started
       FROM pg_stat_activity WHERE pid = pg_backend_pid()`,
    )
    .pipe(
      Effect.map((result): Option.Option<Backend> => {
        const row = result.rows[0]
        const pid = Number(row?.pid)
        const started = row?.started
        return pid === connection.processId && typeof started === "string"
          ? Option.some({ pid, started })
          : Option.none()
      }),
    )
