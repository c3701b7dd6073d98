/**
 * A subscription's delivery options (see src/webhooks/SubscriptionOptions.ts):
 *
 * - `rate_limit`: requests per second its drainer never exceeds for the endpoint; NULL: no limit.
 * - `headers`: extra request headers, a JSON object of lower-case names to values; `{}`: none.
 *
 * Both are checked in code before they are written; the CHECKs only keep a hand-written UPDATE
 * from storing what the drainer could not use.
 */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"

export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    ALTER TABLE webhook_subscriptions
      ADD COLUMN rate_limit double precision CHECK (rate_limit > 0 AND rate_limit <= 10000),
      ADD COLUMN headers jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(headers) = 'object')`
})
