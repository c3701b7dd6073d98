/**
 * The event log: a one-row counter (`event_seq`) that serializes commits and keeps the log epoch,
 * and `event_log`, partitioned by day (UTC) on `occurred_at` so retention can detach whole days.
 *
 * There is deliberately no DEFAULT partition: an append whose day has no partition must fail
 * loudly rather than be swallowed (pgmq#583). `event_log_ensure_partitions` creates days ahead.
 */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"

export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE event_seq (
      id boolean PRIMARY KEY DEFAULT true CHECK (id),
      value bigint NOT NULL DEFAULT 0 CHECK (value >= 0),
      epoch integer NOT NULL DEFAULT 1 CHECK (epoch >= 1)
    )`
  yield* sql`INSERT INTO event_seq DEFAULT VALUES`
  yield* sql`
    CREATE TABLE event_log (
      seq bigint NOT NULL,
      epoch integer NOT NULL,
      occurred_at timestamptz NOT NULL,
      space_id text NOT NULL,
      type text NOT NULL,
      actor text NOT NULL,
      payload jsonb NOT NULL,
      trace_parent text,
      PRIMARY KEY (seq, occurred_at)
    ) PARTITION BY RANGE (occurred_at)`
  // A transaction-scoped advisory lock (safe behind poolers, unlike session locks) keeps two
  // workers from racing on the same CREATE TABLE.
  yield* sql`
    CREATE FUNCTION event_log_ensure_partitions(ahead interval) RETURNS integer
    LANGUAGE plpgsql AS $$
    DECLARE
      day date := (clock_timestamp() AT TIME ZONE 'UTC')::date;
      last_day date := ((clock_timestamp() + ahead) AT TIME ZONE 'UTC')::date;
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
  yield* sql`SELECT event_log_ensure_partitions(interval '14 days')`
})
