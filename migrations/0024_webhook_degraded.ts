/**
 * A webhook subscription's health (src/webhooks/subscriptions/SubscriptionHealth.ts): attempts
 * and failed attempts counted in two buckets of the window's length, the current one starting at
 * `health_since` and the one before it, and `degraded_at`, set while more attempts fail over the
 * window than the threshold allows. Degraded is a flag beside `state`: a degraded subscription is
 * still `active` and still delivers.
 */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"

export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    ALTER TABLE webhook_subscriptions
      ADD COLUMN degraded_at timestamptz,
      ADD COLUMN health_since timestamptz,
      ADD COLUMN health_sent integer NOT NULL DEFAULT 0,
      ADD COLUMN health_failed integer NOT NULL DEFAULT 0,
      ADD COLUMN health_prev_sent integer NOT NULL DEFAULT 0,
      ADD COLUMN health_prev_failed integer NOT NULL DEFAULT 0`
})
