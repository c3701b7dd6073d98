/**
 * Pending partition detaches. `ALTER TABLE event_log DETACH PARTITION ... CONCURRENTLY` that was
 * interrupted (cancelled, its connection lost, or the database restored from a backup taken while
 * it ran) leaves the partition pending (`pg_inherits.inhdetachpending`): invisible to queries, and
 * every other detach of `event_log` refused until `DETACH ... FINALIZE` completes it.
 *
 * Measured on PostgreSQL 18.4: unlike `CONCURRENTLY`, `FINALIZE` runs inside a transaction block
 * (and rolls back with it), and it waits for every transaction whose snapshot is older than its
 * own, as the interrupted detach would have; so a long transaction elsewhere holds it up.
 * The partition, once detached, is a table of its own with its rows; dropping it is retention's
 * part, not this one's.
 */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"

/** The partitions of `event_log` whose detach is pending, by name. */
export const pending = (sql: SqlClient.SqlClient) =>
  sql<{ name: string }>`
    SELECT c.relname AS name
    FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid
    WHERE i.inhparent = 'event_log'::regclass AND i.inhdetachpending
    ORDER BY c.relname`

/** Completes every pending detach of an `event_log` partition; returns the partitions' names. */
export const finalizePending = Effect.fn("EventLogDetach.finalizePending")(function* () {
  const sql = yield* SqlClient.SqlClient
  const pendingNow = yield* pending(sql)
  for (const { name } of pendingNow) yield* sql`ALTER TABLE event_log DETACH PARTITION ${sql(name)} FINALIZE`
  return pendingNow.map((p) => p.name)
})
