/**
 * The `post_commit` sequencing mode (`log.sequencing`): producers append to `event_log_pending`,
 * with no shared lock, and the one sequencer that holds the `event_sequencer` lease moves committed
 * appends into `event_log`, numbering them there. `event_log` itself keeps holding only numbered
 * events, so its readers are the same in both modes.
 *
 * - `event_log_pending`: one row per append (its events as the same JSON the counter mode's
 *   statement reads), numbered by an identity that the sequencer orders by. Rows live there from
 *   their commit until the next batch, so the table stays small but churns like a queue: autovacuum
 *   is told to visit it after a thousand dead rows rather than after a fifth of the table.
 * - `event_log.append_id`: the pending row an event came from, so a producer can learn its seqs.
 *   NULL for counter-mode appends, which the partial index leaves out (their insert costs nothing
 *   more than a NULL column).
 * - `event_sequencer`: the lease, one row. Its times are the database's (`clock_timestamp()`), the
 *   one clock every worker shares.
 */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"

export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE event_log_pending (
      id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      appended_at timestamptz NOT NULL DEFAULT clock_timestamp(),
      events jsonb NOT NULL CHECK (jsonb_typeof(events) = 'array' AND jsonb_array_length(events) > 0)
    ) WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000,
            autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 1000)`
  yield* sql`ALTER TABLE event_log ADD COLUMN append_id bigint`
  yield* sql`CREATE INDEX event_log_append_id ON event_log (append_id) WHERE append_id IS NOT NULL`
  yield* sql`
    CREATE TABLE event_sequencer (
      id boolean PRIMARY KEY DEFAULT true CHECK (id),
      holder text,
      acquired_at timestamptz,
      expires_at timestamptz NOT NULL DEFAULT '-infinity'
    )`
  yield* sql`INSERT INTO event_sequencer DEFAULT VALUES`
})
