/**
 * The attempts by time: the status page lists the newest attempts first (`Status.recentAttempts`),
 * and a retry of an old delivery is newer than the first attempt of a later one, so the order is
 * `started_at`, not the primary key (delivery, number). With this index that read is `limit` rows
 * whatever the history's size; without it, a sort of every attempt kept at each reload.
 *
 * Built in the migration's transaction (not CONCURRENTLY, which cannot run in one): inserts of
 * attempts wait while it builds, over at most `webhook.history_retention` of attempts.
 */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"

export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE INDEX webhook_attempts_started ON webhook_attempts (started_at)`
})
