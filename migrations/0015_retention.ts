/**
 * What retention and pruned reads need.
 *
 * - `event_seq.last_at`: the time of the newest event (times a clock step back left out of order
 *   before this migration are raised first, see below). Appends take `greatest(clock_timestamp(),
 *   last_at)` as their time (under the counter's lock), so `occurred_at` never decreases with `seq`,
 *   even when the system clock steps back. That makes a seq's time a lower bound for every later
 *   event's, which is what lets a read after a cursor skip the older day partitions.
 * - `event_consumer_cursors.last_at`: a lower bound of the time of every event after the cursor
 *   (the time of the event at `last_seq`, or earlier); `-infinity` for no bound.
 * - `webhook_deliveries.event_at`: its event's time, so the drainer's event lookup hits one
 *   partition (NULL on deliveries made before this migration: no bound).
 * - `event_log_ensure_partitions(since, ahead)`: creates the day partitions from the day of `since`
 *   (the worker's `Clock`, not the database's) through `since + ahead`.
 * - an index of finished deliveries by time, for the bounded removal of history.
 */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"

export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  // Before, an append's time was the clock's alone: one that stepped back left a later seq with an
  // earlier time. Those times are raised to the latest before them (one pass over the log; on a
  // log without such a step it changes nothing), so the rule holds for the whole log.
  yield* sql`
    WITH running AS (
      SELECT seq, occurred_at, max(occurred_at) OVER (ORDER BY seq) AS at FROM event_log
    )
    UPDATE event_log AS e SET occurred_at = r.at
    FROM running AS r
    WHERE e.seq = r.seq AND e.occurred_at = r.occurred_at AND r.at > r.occurred_at`
  yield* sql`ALTER TABLE event_seq ADD COLUMN last_at timestamptz NOT NULL DEFAULT '-infinity'`
  yield* sql`UPDATE event_seq SET last_at = coalesce((SELECT max(occurred_at) FROM event_log), '-infinity')`
  yield* sql`ALTER TABLE event_consumer_cursors ADD COLUMN last_at timestamptz NOT NULL DEFAULT '-infinity'`
  yield* sql`
    UPDATE event_consumer_cursors AS c
    SET last_at = coalesce((SELECT e.occurred_at FROM event_log AS e WHERE e.seq = c.last_seq), '-infinity')`
  yield* sql`ALTER TABLE webhook_deliveries ADD COLUMN event_at timestamptz`
  yield* sql`
    CREATE INDEX webhook_deliveries_finished ON webhook_deliveries (finished_at) WHERE state <> 'pending'`
  yield* sql`
    CREATE FUNCTION event_log_ensure_partitions(since timestamptz, ahead interval) RETURNS integer
    LANGUAGE plpgsql AS $$
    DECLARE
      day date := (since AT TIME ZONE 'UTC')::date;
      last_day date := ((since + ahead) AT TIME ZONE 'UTC')::date;
      part text;
      created integer := 0;
    BEGIN
      PERFORM pg_advisory_xact_lock(hashtext('bothy.event_log_ensure_partitions'));
      WHILE day <= last_day LOOP
        part := 'event_log_' || to_char(day, 'YYYYMMDD');
        IF to_regclass(part) IS NULL THEN
          EXECUTE format(
            'CREATE TABLE %I PARTITION OF event_log FOR VALUES FROM (%L) TO (%L)',
            part, day::timestamp AT TIME ZONE 'UTC', (day + 1)::timestamp AT TIME ZONE 'UTC');
          created := created + 1;
        END IF;
        day := day + 1;
      END LOOP;
      RETURN created;
    END $$`
})
