/**
 * Each day partition of `event_log` created from now on is itself partitioned by hour: 24 leaves
 * (`event_log_YYYYMMDD_hHH`) under the day (`event_log_YYYYMMDD`). The day stays the unit of
 * retention (one detach) and of pruning; the hour is the unit in which a detached day's blocks are
 * freed. Dropping a day of 1,000,000 events (142 MB) at once stalled every commit of the server up
 * to 76 ms on a filesystem with online discard; an hour of it (6 MB), up to 14 ms (see
 * `Retention`). Days created before stay whole; retention drops them as before.
 *
 * Both forms of `event_log_ensure_partitions` create the leaves with their day, in the same
 * transaction, so a day never exists without them. The whole days already created ahead that are
 * still empty (from tomorrow on) are replaced by split ones here; dropping an attached partition
 * locks `event_log` for a moment, which a migration at start may.
 */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"

export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE OR REPLACE FUNCTION event_log_ensure_partitions(since timestamptz, ahead interval) RETURNS integer
    LANGUAGE plpgsql AS $$
    DECLARE
      day date := (since AT TIME ZONE 'UTC')::date;
      last_day date := ((since + ahead) AT TIME ZONE 'UTC')::date;
      part text;
      starts timestamptz;
      created integer := 0;
    BEGIN
      PERFORM pg_advisory_xact_lock(hashtext('bothy.event_log_ensure_partitions'));
      WHILE day <= last_day LOOP
        part := 'event_log_' || to_char(day, 'YYYYMMDD');
        IF to_regclass(part) IS NULL THEN
          starts := day::timestamp AT TIME ZONE 'UTC';
          EXECUTE format(
            'CREATE TABLE %I PARTITION OF event_log FOR VALUES FROM (%L) TO (%L) PARTITION BY RANGE (occurred_at)',
            part, starts, starts + interval '1 day');
          FOR hour IN 0..23 LOOP
            EXECUTE format(
              'CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%L) TO (%L)',
              part || '_h' || lpad(hour::text, 2, '0'), part,
              starts + make_interval(hours => hour), starts + make_interval(hours => hour + 1));
          END LOOP;
          created := created + 1;
        END IF;
        day := day + 1;
      END LOOP;
      RETURN created;
    END $$`
  yield* sql`
    CREATE OR REPLACE FUNCTION event_log_ensure_partitions(ahead interval) RETURNS integer
    LANGUAGE sql AS $$ SELECT event_log_ensure_partitions(clock_timestamp(), ahead) $$`
  yield* sql`
    DO $$
    DECLARE
      part record;
      empty boolean;
      last_day date;
    BEGIN
      FOR part IN
        SELECT c.relname AS name, to_date(substr(c.relname, 11), 'YYYYMMDD') AS day
        FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'event_log'::regclass AND c.relkind = 'r' AND c.relname ~ '^event_log_[0-9]{8}$'
          AND to_date(substr(c.relname, 11), 'YYYYMMDD') > (clock_timestamp() AT TIME ZONE 'UTC')::date
      LOOP
        EXECUTE format('SELECT NOT EXISTS (SELECT FROM %I)', part.name) INTO empty;
        IF empty THEN
          EXECUTE format('DROP TABLE %I', part.name);
          last_day := greatest(last_day, part.day);
        END IF;
      END LOOP;
      IF last_day IS NOT NULL THEN
        PERFORM event_log_ensure_partitions(clock_timestamp(),
          (last_day - (clock_timestamp() AT TIME ZONE 'UTC')::date) * interval '1 day');
      END IF;
    END $$`
})
