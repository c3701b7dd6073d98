/**
 * Bounds of a read by seq that PostgreSQL can prune hour leaves with before it runs the read.
 *
 * A consumer reads `seq > c.last_seq AND occurred_at >= c.last_at AND occurred_at <= head`, with
 * the cursor row locked in the same statement: values of another relation, which prune only while
 * the read runs, after every one of the log's leaves (30 days kept, 14 ahead, 24 each: about 1,000)
 * was opened and set up. That cost 3 to 4 ms a read, and about 100 ms of planning. A STABLE function
 * is evaluated once when the statement starts, and the leaves it excludes are never opened. What
 * these return is read in the statement's snapshot: the cursor can only have moved on by the time
 * its row is locked, and `last_at` never decreases, so `event_log_cursor_at` stays a lower bound of
 * the times after the locked position; the head's time bounds what that snapshot can read. The
 * drainer's lookup of its batch's events joins by each delivery's `event_at`, so likewise
 * `webhook_pending_since` bounds it by the oldest event of the pending deliveries it reads.
 */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"

export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE FUNCTION event_log_cursor_at(consumer_name text) RETURNS timestamptz
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$ SELECT coalesce((SELECT last_at FROM event_consumer_cursors WHERE name = consumer_name), '-infinity') $$`
  yield* sql`
    CREATE FUNCTION event_log_head_at() RETURNS timestamptz
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$ SELECT coalesce((SELECT last_at FROM event_seq), 'infinity') $$`
  // The first pending delivery by seq has the oldest event: times never decrease with seq.
  yield* sql`
    CREATE FUNCTION webhook_pending_since(subscription uuid, after_seq bigint) RETURNS timestamptz
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$ SELECT coalesce((
      SELECT date_trunc('milliseconds', event_at) FROM webhook_deliveries
      WHERE subscription_id = subscription AND state = 'pending' AND event_seq > after_seq
      ORDER BY event_seq LIMIT 1), '-infinity') $$`
})
