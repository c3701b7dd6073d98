/**
 * Push: the browsers' registrations, and the default, replaceable audience model (space
 * membership and mutes) that the `push` consumer reads when a host app gives no other.
 *
 * - `push_registrations`: one row per endpoint (a browser's subscription belongs to one browser;
 *   registering it again, under whichever principal is signed in there now, refreshes the row).
 *   `refreshed_at` is indexed for the sweep that removes registrations the browser stopped renewing.
 * - `space_members`: who belongs to a space.
 * - `notification_preferences`: each row is a mute. A NULL `space_id` mutes the type everywhere, a
 *   NULL `event_type` mutes the whole space; one of them is always given.
 *
 * The `push` cursor has existed since 0002 with nothing behind it. Before this migration no
 * registration could exist, so no event before the head has anyone to reach: the cursor moves to
 * the head, rather than reading (or reporting lost) everything since 0002.
 */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"

export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE push_registrations (
      id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      principal text NOT NULL,
      endpoint text NOT NULL UNIQUE,
      p256dh text NOT NULL,
      auth text NOT NULL,
      created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
      refreshed_at timestamptz NOT NULL DEFAULT clock_timestamp()
    )`
  yield* sql`CREATE INDEX push_registrations_principal ON push_registrations (principal)`
  yield* sql`CREATE INDEX push_registrations_refreshed_at ON push_registrations (refreshed_at)`
  yield* sql`
    CREATE TABLE space_members (
      space_id text NOT NULL,
      principal text NOT NULL,
      joined_at timestamptz NOT NULL DEFAULT clock_timestamp(),
      PRIMARY KEY (space_id, principal)
    )`
  yield* sql`
    CREATE TABLE notification_preferences (
      principal text NOT NULL,
      space_id text,
      event_type text,
      muted_at timestamptz NOT NULL DEFAULT clock_timestamp(),
      CHECK (space_id IS NOT NULL OR event_type IS NOT NULL)
    )`
  yield* sql`
    CREATE UNIQUE INDEX notification_preferences_mute
    ON notification_preferences (principal, coalesce(space_id, ''), coalesce(event_type, ''))`
  yield* sql`
    UPDATE event_consumer_cursors SET last_seq = (SELECT value FROM event_seq), updated_at = clock_timestamp()
    WHERE name = 'push'`
})
