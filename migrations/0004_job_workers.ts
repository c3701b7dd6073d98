/**
 * Worker leases for rescue by heartbeat: each worker process keeps its row's `expires_at` in the
 * future; the running jobs of a worker whose lease expired go back to `retryable` within seconds,
 * instead of after an hours-long job timeout.
 */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"

export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE job_workers (
      id text PRIMARY KEY,
      started_at timestamptz NOT NULL DEFAULT clock_timestamp(),
      heartbeat_at timestamptz NOT NULL DEFAULT clock_timestamp(),
      expires_at timestamptz NOT NULL
    )`
  yield* sql`CREATE INDEX jobs_running ON jobs (attempted_by) WHERE state = 'running'`
})
