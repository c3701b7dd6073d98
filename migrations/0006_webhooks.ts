/**
 * Outgoing webhooks: subscriptions, the spaces each one covers (indexed by space, so the consumer
 * finds the few matching subscriptions of an event without scanning them all), the deliveries the
 * `webhooks` consumer creates (one per subscription and event, numbered gap-free per subscription),
 * and every attempt.
 *
 * A subscription receives events with seq above `started_seq`, in seq order; `last_delivered_seq`
 * only moves forward. Receivers see the per-subscription `sequence`, never the global seq.
 */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"

export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE webhook_subscriptions (
      id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
      owner text NOT NULL,
      url text NOT NULL,
      secret_sealed text NOT NULL,
      previous_secret_sealed text,
      previous_secret_until timestamptz,
      event_types text[] NOT NULL DEFAULT '{}',
      state text NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'disabled')),
      disabled_cause text CHECK (disabled_cause IN ('gap', 'gone', 'failing', 'manual')),
      disabled_at timestamptz,
      started_seq bigint NOT NULL,
      last_delivered_seq bigint NOT NULL,
      sequence bigint NOT NULL DEFAULT 0,
      failing_first_at timestamptz,
      failing_clock_at timestamptz,
      created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
      CHECK ((state = 'disabled') = (disabled_cause IS NOT NULL))
    )`
  yield* sql`
    CREATE TABLE webhook_subscription_spaces (
      space_id text NOT NULL,
      subscription_id uuid NOT NULL REFERENCES webhook_subscriptions ON DELETE CASCADE,
      PRIMARY KEY (space_id, subscription_id)
    )`
  yield* sql`CREATE INDEX webhook_subscription_spaces_subscription ON webhook_subscription_spaces (subscription_id)`
  yield* sql`
    CREATE TABLE webhook_deliveries (
      id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      subscription_id uuid NOT NULL REFERENCES webhook_subscriptions ON DELETE CASCADE,
      event_seq bigint NOT NULL,
      epoch integer NOT NULL,
      sequence bigint NOT NULL,
      state text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'dead')),
      dead_reason text,
      parked boolean NOT NULL DEFAULT false,
      attempts integer NOT NULL DEFAULT 0,
      last_status integer,
      last_error_class text,
      last_attempt_at timestamptz,
      created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
      finished_at timestamptz,
      UNIQUE (subscription_id, event_seq),
      UNIQUE (subscription_id, sequence)
    )`
  yield* sql`
    CREATE INDEX webhook_deliveries_pending ON webhook_deliveries (subscription_id, event_seq)
    WHERE state = 'pending'`
  yield* sql`
    CREATE TABLE webhook_attempts (
      delivery_id bigint NOT NULL REFERENCES webhook_deliveries ON DELETE CASCADE,
      number integer NOT NULL,
      started_at timestamptz NOT NULL,
      duration_ms integer NOT NULL,
      status integer,
      error_class text,
      response_body text,
      response_truncated boolean NOT NULL DEFAULT false,
      PRIMARY KEY (delivery_id, number)
    )`
})
