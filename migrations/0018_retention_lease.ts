/**
 * The retention lease, one row: which worker's retention run may detach and drop partitions now
 * (`holder`) and until when (`expires_at`, database time). PostgreSQL lets one detach of
 * `event_log` be pending at a time and refuses any other meanwhile ("already pending detach"),
 * so two runs at once refuse each other's days and both can skip the same one (see
 * src/log/RetentionLease.ts).
 */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"

export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE retention_lease (
      id boolean PRIMARY KEY DEFAULT true CHECK (id),
      holder text,
      expires_at timestamptz NOT NULL DEFAULT '-infinity'
    )`
  yield* sql`INSERT INTO retention_lease DEFAULT VALUES`
})
