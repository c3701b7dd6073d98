/**
 * A delivery's `sequence` is handed out when it is first sent, no longer when the round creates
 * it: suppressed, scope-removed and dead-before-send deliveries take none, so a gap in what a
 * receiver sees means loss and nothing else.
 *
 * - `webhook_deliveries.sequence` may be NULL: not numbered yet (or never sent). Its uniqueness
 *   per subscription becomes a partial index over the numbered rows only: the round creates
 *   deliveries unnumbered, and as a plain UNIQUE (subscription_id, sequence) each of them cost an
 *   index entry for its NULL (the round alone ran about 20 % slower with it).
 * - `webhook_subscriptions.last_sequence`: the last number a delivery of the subscription took,
 *   bumped by the drainer, which already updates this row when it records; `numbered_by` changes
 *   with every statement that hands out, keeps or gives back numbers, so a drainer gives numbers
 *   back only while nobody has touched them since (see src/WebhookNumbering.ts). Neither lives on
 *   the `webhook_drains` row, which every round locks: that row was split out (0007) so that rounds
 *   and drainers do not wait on each other.
 * - `webhook_drains.sequence` goes: the round still locks the drain row of every subscription it
 *   creates deliveries for (the no-lost-wake-up argument rests on that lock), but hands out no
 *   numbers.
 *
 * Deliveries numbered by the round before this migration keep their numbers, pending ones too, and
 * each counter starts at the highest number its subscription handed out; a pending one that turns
 * out suppressed keeps its number, the one gap this migration can leave.
 */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"

export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE webhook_deliveries ALTER COLUMN sequence DROP NOT NULL`
  yield* sql`
    ALTER TABLE webhook_subscriptions
      ADD COLUMN last_sequence bigint NOT NULL DEFAULT 0,
      ADD COLUMN numbered_by uuid`
  yield* sql`
    UPDATE webhook_subscriptions AS s SET last_sequence = w.sequence
    FROM webhook_drains AS w WHERE w.subscription_id = s.id AND w.sequence > 0`
  yield* sql`ALTER TABLE webhook_drains DROP COLUMN sequence`
  yield* sql`
    CREATE UNIQUE INDEX webhook_deliveries_sequence ON webhook_deliveries (subscription_id, sequence)
    WHERE sequence IS NOT NULL`
  yield* sql`ALTER TABLE webhook_deliveries DROP CONSTRAINT webhook_deliveries_subscription_id_sequence_key`
})
