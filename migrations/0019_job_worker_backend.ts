/**
 * Rescue by backend: each worker records the PostgreSQL backend of the connection it keeps open for
 * its whole life (pid and `backend_start`, which together never name another backend). When that
 * backend is gone from `pg_stat_activity`, the process is taken as dead and its running jobs go back
 * within about a second, instead of waiting out its lease. NULL: unknown (a pooler in between, or not
 * connected yet), and only the lease applies (see src/jobs/JobLiveness.ts).
 */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"

export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE job_workers ADD COLUMN backend_pid integer, ADD COLUMN backend_start timestamptz`
})
