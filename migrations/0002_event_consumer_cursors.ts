/**
 * One durable cursor per consumer. The allowed consumer names are exactly the rows here; a new
 * consumer is an additive migration that inserts its row with `last_seq` at the head, so it starts
 * with the events committed after it was added.
 */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"

export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE event_consumer_cursors (
      name text PRIMARY KEY CHECK (name ~ '^[a-z][a-z0-9_]*$'),
      last_seq bigint NOT NULL CHECK (last_seq >= 0),
      updated_at timestamptz NOT NULL DEFAULT clock_timestamp()
    )`
  yield* sql`
    INSERT INTO event_consumer_cursors (name, last_seq)
    SELECT name, (SELECT value FROM event_seq) FROM unnest(ARRAY['webhooks', 'push']) AS name`
})
