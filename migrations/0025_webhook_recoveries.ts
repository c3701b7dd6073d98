/**
 * Bulk recoveries of webhook deliveries: one row per recovery, what it selects (`filter`), how far
 * it got (`cursor_subscription`, `cursor_seq`: the last delivery it dealt with, in
 * (subscription, seq) order) and what it did. The row outlives the job that runs it (a completed
 * job's row is deleted), so its progress can be read afterwards; `job_id` is the job that runs it
 * now (a resumed recovery whose job row was cleaned away gets a new one).
 *
 * `replay_to` names the subscription a replay seeds (the old one's deliveries go to it) and
 * `replay_from` the head of the log when it was created, from which it goes on once seeded.
 */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"

export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE webhook_recoveries (
      id bigint PRIMARY KEY,
      job_id bigint NOT NULL,
      owner text,
      filter jsonb NOT NULL,
      batch_size int NOT NULL CHECK (batch_size BETWEEN 1 AND 10000),
      replay_to uuid REFERENCES webhook_subscriptions (id) ON DELETE SET NULL,
      replay_from bigint,
      state text NOT NULL DEFAULT 'running' CHECK (state IN ('running', 'paused', 'done')),
      total int NOT NULL,
      examined int NOT NULL DEFAULT 0,
      resent int NOT NULL DEFAULT 0,
      skipped int NOT NULL DEFAULT 0,
      cursor_subscription uuid,
      cursor_seq bigint,
      created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
      updated_at timestamptz NOT NULL DEFAULT clock_timestamp(),
      finished_at timestamptz
    )`
  yield* sql`CREATE INDEX webhook_recoveries_job ON webhook_recoveries (job_id)`
})
