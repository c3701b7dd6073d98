/**
 * The `webhooks` consumer: in each round, every event gets a delivery for each active subscription
 * whose scope holds the event's space, whose event types or patterns match its type and whose
 * payload filter (if any) its payload passes, all in the round's
 * transaction; and each subscription that got deliveries gets one drain job (`WebhookDrainer`),
 * unless a live drainer already holds its slot. Deliveries take their `sequence` only when they
 * are sent (`WebhookNumbering`), so the round hands out none.
 *
 * Matching looks up each event's space in `webhook_subscription_spaces` (a LATERAL index probe per
 * event, so the cost is the matching subscriptions, not all of them). The events come in as typed
 * arrays, so the planner knows how many there are. A subscription receives only events after the
 * one it started at. A payload filter is a stored SQL/JSON path predicate, evaluated as
 * `payload @@ filter_path` in the same statement (`SubscriptionRows.takesSql`): the statement's
 * text is the same whatever the filters, so it stays prepared, and a filter changed by an update
 * applies from the next round on.
 *
 * The round upserts the `webhook_drains` row of every subscription it creates deliveries for,
 * which locks that row until the round commits: exactly the lock a finishing drainer takes before
 * it re-checks for pending deliveries. So when the round sees a live drainer holding the slot and
 * creates no job, that drainer's release check runs after this round's deliveries are committed
 * and sees them (the argument, and the slot's fragments the round composes, are in DrainSlot.ts).
 *
 * Loss: when events after the cursor left the log before the round read them, every active
 * subscription that began before the end of the lost range is disabled with cause `gap`.
 */
import { type Array as Arr, type Duration, Effect } from "effect"
import { SqlClient } from "effect/sql"
import * as Consumer from "../consumer/Consumer.ts"
import type { FanOutJob, LostRange, RoundOf } from "../consumer/ConsumerRound.ts"
import * as StatementRound from "../consumer/StatementRound.ts"
import type { Event } from "../log/Event.ts"
import { deliverKind, drainJob, maxAttempts, queue } from "./drain/DrainJob.ts"
import { heldCtes, lockedCte } from "./drain/DrainSlot.ts"
import { takesSql } from "./subscriptions/SubscriptionRows.ts"
import { disableStartedBefore } from "./subscriptions/SubscriptionStates.ts"

/** The channel of the round's nudges to live drainers. */
export { drainChannel } from "./drain/DrainSlot.ts"
/** The drain job the round creates (kept here too: hosts and the benchmark name them from the round). */
export { deliverKind, drainJob, maxAttempts, queue }

export const name = "webhooks"

/**
 * A batch of events as rows `e(seq, space, type, epoch, occurred_at, payload)`: one typed array per
 * column, so the planner knows the count.
 * @internal
 */
export const eventRows = (sql: SqlClient.SqlClient, events: ReadonlyArray<Event>) =>
  sql`unnest(${events.map((e) => e.seq.toString())}::bigint[], ${events.map((e) => e.space)}::text[],
             ${events.map((e) => e.type)}::text[], ${events.map((e) => e.epoch)}::int[],
             ${events.map((e) => e.occurredAt.toISOString())}::timestamptz[],
             ${events.map((e) => JSON.stringify(e.payload))}::jsonb[]) AS e(seq, space, type, epoch, occurred_at, payload)`

/**
 * `matched AS (...)`: the (event, active subscription) pairs of the events in `ev(seq, space, type,
 * epoch, occurred_at, payload)`. Each `OFFSET 0` LATERAL keeps matching a probe per event of the
 * space index, then of the subscriptions' primary key per candidate: without them the planner
 * hashes a scan of every subscription (once per batch, or worse once per event), whatever the
 * batch's size. The second probe depends on the subscription's key alone; what depends on the
 * event (its seq, type and payload) is tested after it, against the probed row only (inside, on a
 * small table the planner scans rather than probes, and it ran the payload's path against every
 * row of the scan before the key's equality). That test is a LATERAL of its own so the planner
 * counts at most one row per pair, not its guess of the filters' selectivity: estimated at a row
 * or two, the rest of the round joins thousands of rows by nested loops.
 */
const matchedCte = (sql: SqlClient.SqlClient) => sql`
  matched AS (
    SELECT e.seq, e.epoch, e.occurred_at, s.id AS sub
    FROM ev AS e
    CROSS JOIN LATERAL (
      SELECT ss.subscription_id FROM webhook_subscription_spaces AS ss WHERE ss.space_id = e.space OFFSET 0
    ) AS ss
    CROSS JOIN LATERAL (
      SELECT s.id, s.started_seq, s.type_patterns, s.filter_path FROM webhook_subscriptions AS s
      WHERE s.id = ss.subscription_id AND s.state = 'active'
      OFFSET 0
    ) AS s
    CROSS JOIN LATERAL (
      SELECT WHERE e.seq > s.started_seq AND ${takesSql(sql, "s", "e.type", "e.payload")} OFFSET 0
    ) AS takes
  )`

/**
 * `WITH ev AS (...), matched AS (...)` for a batch of events (the fan-out's, and the benchmark's plan).
 * @internal
 */
export const matched = (sql: SqlClient.SqlClient, events: ReadonlyArray<Event>) => sql`
  WITH ev AS (
    SELECT * FROM ${eventRows(sql, events)}
  ), ${matchedCte(sql)}`

/**
 * After `ev`: `matched`, `counted` (per subscription: its first seq), `locked` (the drain rows,
 * upserted: `DrainSlot.lockedCte`) and `inserted` (the deliveries, not numbered yet). Then
 * `DrainSlot.heldCtes` reads each slot's holder under that lock.
 * @internal
 */
export const deliveriesCtes = (sql: SqlClient.SqlClient) => sql`
  ${matchedCte(sql)}, counted AS (
    SELECT sub, min(seq) AS first FROM matched GROUP BY sub
  ), ${lockedCte(sql)}, inserted AS (
    INSERT INTO webhook_deliveries (subscription_id, event_seq, epoch, event_at)
    SELECT sub, seq, epoch, occurred_at FROM matched
  )`

export interface FanOutOptions {
  /**
   * No job for a subscription whose slot a live drainer holds (it will see the new deliveries).
   * Off: one job per subscription and round, and the extra ones end at once as no-ops.
   */
  readonly skipHeld: boolean
}

export const makeFanOut = (options: FanOutOptions) =>
  Effect.fn("WebhookFanOut.fanOut")(function* (events: Arr.NonEmptyReadonlyArray<Event>) {
    const sql = yield* SqlClient.SqlClient
    const rows = yield* sql<{ subscription: string; seq: bigint; slotTaken: boolean }>`
      WITH ev AS (
        SELECT * FROM ${eventRows(sql, events)}
      ), ${deliveriesCtes(sql)}, ${heldCtes(sql)}
      SELECT sub::text AS subscription, first AS seq, is_held AS "slotTaken", (SELECT count(*) FROM nudged)::int AS nudged
      FROM held`
    return rows
      .filter((r) => !(options.skipHeld && r.slotTaken))
      .map((r): FanOutJob => ({ seq: r.seq, receiver: r.subscription, ...drainJob(r.subscription) }))
  })

export const fanOut = makeFanOut({ skipHeld: true })

/**
 * The fan-out as SQL, for the one-statement round (`StatementRound`): after `ev`, the deliveries,
 * the drain rows and the nudges of live drainers, as in `makeFanOut`, and `wanted`, the drain job of
 * each subscription that got deliveries (unless a live drainer holds its slot), as `drainJob` has it.
 */
export const statementFanOut = (options: FanOutOptions): StatementRound.StatementFanOut => ({
  ctes: (sql) => sql`
    ${deliveriesCtes(sql)}, ${heldCtes(sql)}, wanted AS (
      SELECT first AS seq, sub::text AS receiver, ${deliverKind}::text AS kind, ${queue}::text AS queue,
             jsonb_build_object('subscription', sub::text) AS args, ${maxAttempts}::int AS max_attempts
      FROM held WHERE NOT (${options.skipHeld} AND is_held)
    )`,
  sideEffects: ["nudged"],
  payload: true,
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

/** The `webhooks` round's options for `Consumer.makeRound` (and, with a poll interval, `Consumer.layer`). */
export const roundOptions = (options: { readonly batchSize: number } & Partial<FanOutOptions>) => {
  const fanOutOptions = { skipHeld: options.skipHeld !== false }
  return {
    name,
    batchSize: options.batchSize,
    fanOut: makeFanOut(fanOutOptions),
    oneStatement: (round: RoundOf) => StatementRound.make({ ...round, fanOut: statementFanOut(fanOutOptions) }),
    onLoss,
  }
}

export const layer = (options: {
  readonly batchSize: number
  readonly pollInterval: Duration.Input
  /** See `Consumer.ConsumerOptions.cooldown`; the worker passes `consumer.cooldown`. */
  readonly cooldown?: Duration.Input
  /** See `FanOutOptions.skipHeld`; default on. */
  readonly skipHeld?: boolean
}) => Consumer.layer({ ...roundOptions(options), pollInterval: options.pollInterval, cooldown: options.cooldown })
