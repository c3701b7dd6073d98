/**
 * The default, replaceable permission model: a principal may do an action in a space when a grant
 * row says so. A host app with its own model provides another `Permissions` layer and ignores this.
 */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"

export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE permission_grants (
      principal text NOT NULL,
      action text NOT NULL,
      space_id text NOT NULL,
      granted_at timestamptz NOT NULL DEFAULT clock_timestamp(),
      PRIMARY KEY (principal, action, space_id)
    )`
})
