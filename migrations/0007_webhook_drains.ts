/**
 * One drain slot per webhook subscription: the job that currently sends the subscription's
 * deliveries, one after another in seq order (`job_id`, NULL when none), and the subscription's
 * gap-free `sequence` counter, moved here from `webhook_subscriptions` so that the `webhooks`
 * round, which bumps the counter, never waits on the subscription row that deliveries update.
 *
 * The round and a finishing drainer meet on this row's lock, which is what keeps a wake-up from
 * being lost (see src/WebhookDelivery.ts).
 *
 * Deliveries no longer park, and a delivery job now names a subscription rather than a delivery:
 * old jobs that have not started are replaced by one drain job per subscription with pending
 * deliveries (a running old job finishes or fails on its own; its deliveries are drained anyway).
 */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"

export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE webhook_drains (
      subscription_id uuid PRIMARY KEY REFERENCES webhook_subscriptions ON DELETE CASCADE,
      sequence bigint NOT NULL DEFAULT 0,
      job_id bigint
    )`
  yield* sql`INSERT INTO webhook_drains (subscription_id, sequence) SELECT id, sequence FROM webhook_subscriptions`
  yield* sql`ALTER TABLE webhook_subscriptions DROP COLUMN sequence`
  yield* sql`ALTER TABLE webhook_deliveries DROP COLUMN parked`
  yield* sql`
    DELETE FROM jobs
    WHERE kind = 'webhook.deliver' AND args ? 'delivery' AND state IN ('available', 'scheduled', 'retryable')`
  yield* sql`
    INSERT INTO jobs (kind, queue, args, max_attempts)
    SELECT 'webhook.deliver', 'webhooks', jsonb_build_object('subscription', subscription_id::text), 25
    FROM (SELECT DISTINCT subscription_id FROM webhook_deliveries WHERE state = 'pending') AS pending`
})
