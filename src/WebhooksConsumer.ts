/**
 * The `webhooks` consumer: in each round, every event gets a delivery for each active subscription
 * whose scope holds the event's space and whose filter holds its type, numbered gap-free per
 * subscription, and one delivery job each, all in the round's transaction.
 *
 * Matching goes through `webhook_subscription_spaces` (indexed by space): the cost is the matching
 * subscriptions, not all of them. A subscription receives only events after the one it started at.
 *
 * Loss: when events after the cursor left the log before the round read them, every active
 * subscription that began before the end of the lost range is disabled with cause `gap`.
 */
import { type Duration, Effect } from "effect"
import { SqlClient } from "effect/sql"
import * as Consumer from "./Consumer.ts"
import type { FanOutJob, LostRange } from "./ConsumerRound.ts"
import type { Event } from "./Event.ts"
import { disableStartedBefore } from "./WebhookSubscriptions.ts"

export const name = "webhooks"
export const deliverKind = "webhook.deliver"
export const queue = "webhooks"
/** Job attempts for infrastructure errors; the delivery's own retries are snoozes (see WebhookSchedule). */
export const maxAttempts = 25

export const deliveryJob = (deliveryId: bigint) => ({
  kind: deliverKind,
  queue,
  args: { delivery: deliveryId.toString() },
  maxAttempts,
})

export const fanOut = Effect.fn("WebhooksConsumer.fanOut")(function* (events: ReadonlyArray<Event>) {
  const sql = yield* SqlClient.SqlClient
  const rows = JSON.stringify(
    events.map((e) => ({ seq: e.seq.toString(), space: e.space, type: e.type, epoch: e.epoch })),
  )
  const created = yield* sql<{ id: bigint; subscriptionId: string; seq: bigint }>`
    WITH ev AS (
      SELECT * FROM jsonb_to_recordset(${rows}::jsonb) AS e(seq bigint, space text, type text, epoch integer)
    ), matched AS (
      SELECT e.seq, e.epoch, s.id AS sub
      FROM ev AS e
      JOIN webhook_subscription_spaces AS ss ON ss.space_id = e.space
      JOIN webhook_subscriptions AS s ON s.id = ss.subscription_id
      WHERE s.state = 'active' AND e.seq > s.started_seq
        AND (cardinality(s.event_types) = 0 OR e.type = ANY (s.event_types))
    ), counted AS (
      SELECT sub, count(*) AS n FROM matched GROUP BY sub
    ), numbered AS (
      UPDATE webhook_subscriptions AS s SET sequence = s.sequence + c.n
      FROM counted AS c WHERE s.id = c.sub
      RETURNING s.id, s.sequence - c.n AS base
    )
    INSERT INTO webhook_deliveries (subscription_id, event_seq, epoch, sequence)
    SELECT m.sub, m.seq, m.epoch, n.base + row_number() OVER (PARTITION BY m.sub ORDER BY m.seq)
    FROM matched AS m JOIN numbered AS n ON n.id = m.sub
    RETURNING id, subscription_id::text AS "subscriptionId", event_seq AS seq`
  return created.map((d): FanOutJob => ({ seq: d.seq, receiver: d.subscriptionId, ...deliveryJob(d.id) }))
})

export const onLoss = (lost: LostRange) =>
  disableStartedBefore(lost.lastSeq).pipe(
    Effect.tap((ids) =>
      Effect.logError(
        `webhooks: events ${lost.firstSeq}..${lost.lastSeq} left the log before delivery; disabled ${ids.length} subscriptions with cause gap`,
      ),
    ),
    Effect.asVoid,
  )

export const layer = (options: { readonly batchSize: number; readonly pollInterval: Duration.Input }) =>
  Consumer.layer({ name, batchSize: options.batchSize, pollInterval: options.pollInterval, fanOut, onLoss })
