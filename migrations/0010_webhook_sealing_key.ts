/**
 * Which key seals this database's webhook secrets: one row, its key id and a check value sealed
 * under it, written by the first process that uses a key here (`SealingKeyCheck`). A worker given
 * another `BOTHY_WEBHOOK_SECRET_KEY` then refuses to start, instead of running with drain jobs
 * that can open no secret.
 */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"

export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE webhook_sealing_key (
      singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
      key_id text NOT NULL,
      check_sealed text NOT NULL,
      created_at timestamptz NOT NULL DEFAULT clock_timestamp()
    )`
})
