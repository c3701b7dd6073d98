/**
 * The `webhooks` consumer: in each round, every event gets a delivery for each active subscription
 * whose scope holds the event's space and whose filter holds its type, numbered gap-free per
 * subscription, all in the round's transaction; and each subscription that got deliveries gets
 * one drain job (`WebhookDelivery`), unless a live drainer already holds its slot.
 *
 * Matching looks up each event's space in `webhook_subscription_spaces` (a LATERAL index probe per
 * event, so the cost is the matching subscriptions, not all of them). The events come in as typed
 * arrays, so the planner knows how many there are. A subscription receives only events after the
 * one it started at.
 *
 * The per-subscription `sequence` lives on the subscription's `webhook_drains` row, not on the
 * subscription itself: bumping it locks that row until the round commits, which is exactly the
 * lock a finishing drainer takes before it re-checks for pending deliveries. So when the round sees
 * a live drainer holding the slot and creates no job, that drainer's release check runs after this
 * round's deliveries are committed and sees them (the full argument is in WebhookDelivery.ts).
 *
 * Loss: when events after the cursor left the log before the round read them, every active
 * subscription that began before the end of the lost range is disabled with cause `gap`.
 */
import { type Array as Arr, type Duration, Effect } from "effect"
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

/** The job that drains one subscription's pending deliveries. */
export const drainJob = (subscriptionId: string) => ({
  kind: deliverKind,
  queue,
  args: { subscription: subscriptionId },
  maxAttempts,
})

/** A batch of events as rows `e(seq, space, type, epoch)`: one typed array per column, so the planner knows the count. */
export const eventRows = (sql: SqlClient.SqlClient, events: ReadonlyArray<Event>) =>
  sql`unnest(${events.map((e) => e.seq.toString())}::bigint[], ${events.map((e) => e.space)}::text[],
             ${events.map((e) => e.type)}::text[], ${events.map((e) => e.epoch)}::int[]) AS e(seq, space, type, epoch)`

/**
 * `WITH ev AS (...), matched AS (...)`: the (event, active subscription) pairs of a batch, for the
 * fan-out (and for the benchmark that explains its plan). Each `OFFSET 0` LATERAL keeps matching a
 * probe per event of the space index, then of the subscriptions' primary key per candidate:
 * without them the planner hashes a scan of every subscription (once per batch, or worse once
 * per event), whatever the batch's size.
 */
export const matched = (sql: SqlClient.SqlClient, events: ReadonlyArray<Event>) => sql`
  WITH ev AS (
    SELECT * FROM ${eventRows(sql, events)}
  ), matched AS (
    SELECT e.seq, e.epoch, s.sub
    FROM ev AS e
    CROSS JOIN LATERAL (
      SELECT ss.subscription_id FROM webhook_subscription_spaces AS ss WHERE ss.space_id = e.space OFFSET 0
    ) AS ss
    CROSS JOIN LATERAL (
      SELECT s.id AS sub FROM webhook_subscriptions AS s
      WHERE s.id = ss.subscription_id AND s.state = 'active' AND e.seq > s.started_seq
        AND (cardinality(s.event_types) = 0 OR e.type = ANY (s.event_types))
      OFFSET 0
    ) AS s
  )`

export interface FanOutOptions {
  /**
   * No job for a subscription whose slot a live drainer holds (it will see the new deliveries).
   * Off: one job per subscription and round, and the extra ones end at once as no-ops.
   */
  readonly skipHeld: boolean
}

export const makeFanOut = (options: FanOutOptions) =>
  Effect.fn("WebhooksConsumer.fanOut")(function* (events: Arr.NonEmptyReadonlyArray<Event>) {
    const sql = yield* SqlClient.SqlClient
    const rows = yield* sql<{ subscription: string; seq: bigint; held: boolean }>`
      ${matched(sql, events)}, counted AS (
        SELECT sub, count(*) AS n, min(seq) AS first FROM matched GROUP BY sub
      ), numbered AS (
        INSERT INTO webhook_drains AS w (subscription_id, sequence)
        SELECT sub, n FROM counted ORDER BY sub
        ON CONFLICT (subscription_id) DO UPDATE SET sequence = w.sequence + excluded.sequence
        RETURNING w.subscription_id AS sub, w.sequence, w.job_id
      ), inserted AS (
        INSERT INTO webhook_deliveries (subscription_id, event_seq, epoch, sequence)
        SELECT m.sub, m.seq, m.epoch, n.sequence - c.n + row_number() OVER (PARTITION BY m.sub ORDER BY m.seq)
        FROM matched AS m JOIN counted AS c ON c.sub = m.sub JOIN numbered AS n ON n.sub = m.sub
      )
      SELECT n.sub::text AS subscription, c.first AS seq,
             (n.job_id IS NOT NULL AND EXISTS (
               SELECT 1 FROM jobs AS j
               WHERE j.id = n.job_id AND j.state IN ('available', 'scheduled', 'running', 'retryable'))) AS held
      FROM numbered AS n JOIN counted AS c ON c.sub = n.sub`
    return rows
      .filter((r) => !(options.skipHeld && r.held))
      .map((r): FanOutJob => ({ seq: r.seq, receiver: r.subscription, ...drainJob(r.subscription) }))
  })

export const fanOut = makeFanOut({ skipHeld: true })

export const onLoss = (lost: LostRange) =>
  disableStartedBefore(lost.lastSeq).pipe(
    Effect.tap((ids) =>
      Effect.logError(
        `webhooks: events ${lost.firstSeq}..${lost.lastSeq} left the log before delivery; disabled ${ids.length} subscriptions with cause gap`,
      ),
    ),
    Effect.asVoid,
  )

export const layer = (options: {
  readonly batchSize: number
  readonly pollInterval: Duration.Input
  /** See `FanOutOptions.skipHeld`; default on. */
  readonly skipHeld?: boolean
}) =>
  Consumer.layer({
    name,
    batchSize: options.batchSize,
    pollInterval: options.pollInterval,
    fanOut: options.skipHeld === false ? makeFanOut({ skipHeld: false }) : fanOut,
    onLoss,
  })
