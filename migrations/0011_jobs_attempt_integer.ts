/**
 * `jobs.attempt` and `jobs.max_attempts` become `integer`. A snooze or a release gives its attempt
 * back by raising `max_attempts` (so `attempt` only grows and outcomes stay compare-and-set), and a
 * webhook drainer under steady load snoozes every few seconds to let other jobs run: as `smallint`
 * both columns overflowed after about 32,700 snoozes (some 45 hours of one busy subscription), and
 * from then on the drainer's outcomes could not be written. As `integer` that is centuries away.
 */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"

export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE jobs ALTER COLUMN attempt TYPE integer, ALTER COLUMN max_attempts TYPE integer`
})
