/**
 * Deliveries whose request may have gone out unrecorded. A delivery takes its `sequence` before its
 * request leaves and a run that ends gives back the numbers of what it did not send, so a pending
 * delivery holding a number and no attempt, found when a run starts, was numbered by a run that
 * stopped without a record (a SIGKILL between the request and the record, or a record the database
 * refused): its receiver may have accepted it. Such a delivery gets an attempt with outcome unknown
 * before anything else happens to it, so whatever follows (sent again under the same id and number,
 * or dead because the right was revoked meanwhile) never reads as "never sent".
 *
 * A run that stopped unrecorded is followed by a later attempt of the same job (its rescue, or its
 * release when its worker lost its backend; an attempt number only grows), so only runs past a
 * job's first attempt look (`WebhookDrainer`). A run's unrecorded requests are the first pending
 * deliveries in seq order (the record only ever misses a suffix of what was sent, and the numbers
 * not given back are the last read's), so the look-up reads no further than a few reads' worth.
 */
import { Effect, Metric } from "effect"
import type { SqlClient } from "effect/sql"
import * as WebhookMetrics from "../WebhookMetrics.ts"

/** What a delivery in doubt's attempt records as its error class. */
export const outcomeUnknown = "outcome_unknown"

/** Records an attempt with outcome unknown for each delivery in doubt among the first `reach` pending. */
export const record = (sql: SqlClient.SqlClient, subscriptionId: string, reach: number) =>
  sql<{ id: bigint }>`
    WITH doubt AS (
      SELECT id FROM (
        SELECT id, sequence, attempts FROM webhook_deliveries
        WHERE subscription_id = ${subscriptionId}::uuid AND state = 'pending'
        ORDER BY event_seq LIMIT ${reach}
      ) AS first_pending
      WHERE sequence IS NOT NULL AND attempts = 0
    ), attempt AS (
      INSERT INTO webhook_attempts (delivery_id, number, started_at, duration_ms, status, error_class)
      SELECT id, 1, clock_timestamp(), 0, NULL, ${outcomeUnknown} FROM doubt
    )
    UPDATE webhook_deliveries AS d
    SET attempts = 1, last_error_class = ${outcomeUnknown}, last_attempt_at = clock_timestamp()
    FROM doubt WHERE d.id = doubt.id AND d.attempts = 0
    RETURNING d.id`.pipe(
    Effect.tap((rows) =>
      rows.length === 0
        ? Effect.void
        : Effect.all([
            Metric.update(Metric.withAttributes(WebhookMetrics.attempts, { outcome: "unknown" }), rows.length),
            Effect.logWarning(
              `webhooks: subscription ${subscriptionId}: ${rows.length} deliveries may have been sent by a worker that stopped before recording them; recorded with outcome unknown (they keep their number and webhook-id)`,
            ),
          ]),
    ),
    Effect.withSpan("WebhookDrainer.recordInDoubt"),
  )
