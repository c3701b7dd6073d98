/**
 * The `webhooks` consumer: in each round, every event gets a delivery for each active subscription
 * whose scope holds the event's space and whose filter holds its type, all in the round's
 * transaction; and each subscription that got deliveries gets one drain job (`WebhookDrainer`),
 * unless a live drainer already holds its slot. Deliveries take their `sequence` only when they
 * are sent (`WebhookNumbering`), so the round hands out none.
 *
 * Matching looks up each event's space in `webhook_subscription_spaces` (a LATERAL index probe per
 * event, so the cost is the matching subscriptions, not all of them). The events come in as typed
 * arrays, so the planner knows how many there are. A subscription receives only events after the
 * one it started at.
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
import { type Array as Arr, type Duration, Effect, Metric } from "effect"
import { SqlClient } from "effect/sql"
import type { SqlError } from "effect/sql/SqlError"
import * as Consumer from "../consumer/Consumer.ts"
import type { FanOutJob, LostRange, RoundOutcome } from "../consumer/ConsumerRound.ts"
import * as JobMetrics from "../jobs/JobMetrics.ts"
import type { Event } from "../log/Event.ts"
import { deliverKind, drainJob, maxAttempts, queue } from "./DrainJob.ts"
import { heldCtes, lockedCte } from "./DrainSlot.ts"
import { disableStartedBefore } from "./SubscriptionStates.ts"

/** The channel of the round's nudges to live drainers. */
export { drainChannel } from "./DrainSlot.ts"
/** The drain job the round creates (kept here too: hosts and the benchmark name them from the round). */
export { deliverKind, drainJob, maxAttempts, queue }

export const name = "webhooks"

/** A batch of events as rows `e(seq, space, type, epoch)`: one typed array per column, so the planner knows the count. */
export const eventRows = (sql: SqlClient.SqlClient, events: ReadonlyArray<Event>) =>
  sql`unnest(${events.map((e) => e.seq.toString())}::bigint[], ${events.map((e) => e.space)}::text[],
             ${events.map((e) => e.type)}::text[], ${events.map((e) => e.epoch)}::int[]) AS e(seq, space, type, epoch)`

/**
 * `matched AS (...)`: the (event, active subscription) pairs of the events in `ev(seq, space, type,
 * epoch)`. Each `OFFSET 0` LATERAL keeps matching a probe per event of the space index, then of the
 * subscriptions' primary key per candidate: without them the planner hashes a scan of every
 * subscription (once per batch, or worse once per event), whatever the batch's size.
 */
const matchedCte = (sql: SqlClient.SqlClient) => sql`
  matched AS (
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

/** `WITH ev AS (...), matched AS (...)` for a batch of events (the fan-out's, and the benchmark's plan). */
export const matched = (sql: SqlClient.SqlClient, events: ReadonlyArray<Event>) => sql`
  WITH ev AS (
    SELECT * FROM ${eventRows(sql, events)}
  ), ${matchedCte(sql)}`

/**
 * After `ev`: `matched`, `counted` (per subscription: its first seq), `locked` (the drain rows,
 * upserted: `DrainSlot.lockedCte`) and `inserted` (the deliveries, not numbered yet). Then
 * `DrainSlot.heldCtes` reads each slot's holder under that lock.
 */
export const deliveriesCtes = (sql: SqlClient.SqlClient) => sql`
  ${matchedCte(sql)}, counted AS (
    SELECT sub, min(seq) AS first FROM matched GROUP BY sub
  ), ${lockedCte(sql)}, inserted AS (
    INSERT INTO webhook_deliveries (subscription_id, event_seq, epoch)
    SELECT sub, seq, epoch FROM matched
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
 * The whole round as one autocommitted statement, so the round costs one round trip instead of
 * four: lock the cursor row (FOR UPDATE SKIP LOCKED), read the batch and the head, and, when the
 * batch follows the cursor without a hole and nothing is missing up to the head, create the
 * deliveries, the drain jobs (as `ConsumerRound` would: same unique key, same NOTIFY) and move the
 * cursor. Anything else (events lost from the log, whose loss handler runs in the round's
 * transaction) is left to the transactional round: `undefined`.
 *
 * A statement that writes nothing but its row lock commits without waiting for the WAL flush.
 */
export const makeStatementRound =
  (options: FanOutOptions) =>
  (round: {
    readonly name: string
    readonly batchSize: number
  }): Effect.Effect<RoundOutcome | undefined, SqlError, SqlClient.SqlClient> =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const rows = yield* sql<{
        after: bigint
        head: bigint
        headEpoch: number
        events: number
        toSeq: bigint | null
        full: boolean
        nextOccurredAt: Date | null
        ok: boolean
        wanted: number
        inserted: number
      }>`
        WITH c AS MATERIALIZED (
          SELECT last_seq FROM event_consumer_cursors WHERE name = ${round.name} FOR UPDATE SKIP LOCKED
        ), read AS MATERIALIZED (
          SELECT e.seq, e.space_id AS space, e.type, e.epoch, e.occurred_at, e.trace_parent,
                 row_number() OVER (ORDER BY e.seq) AS n
          FROM c CROSS JOIN LATERAL (
            SELECT seq, space_id, type, epoch, occurred_at, trace_parent FROM event_log
            WHERE seq > c.last_seq ORDER BY seq LIMIT ${round.batchSize + 1}
          ) AS e
        ), pos AS MATERIALIZED (
          SELECT c.last_seq AS after, h.value AS head, h.epoch AS head_epoch,
                 (SELECT count(*) FROM read WHERE n <= ${round.batchSize})::int AS events,
                 (SELECT max(seq) FROM read WHERE n <= ${round.batchSize}) AS to_seq,
                 (SELECT count(*) FROM read) > ${round.batchSize} AS is_full,
                 (SELECT occurred_at FROM read WHERE n = ${round.batchSize + 1}) AS next_occurred_at
          FROM c CROSS JOIN event_seq AS h
        ), go AS MATERIALIZED (
          SELECT coalesce(events > 0 AND to_seq - after = events AND (is_full OR to_seq = head), false) AS ok FROM pos
        ), ev AS (
          SELECT seq, space, type, epoch FROM read WHERE n <= ${round.batchSize} AND (SELECT ok FROM go)
        ), ${deliveriesCtes(sql)}, ${heldCtes(sql)}, wanted AS (
          SELECT sub, first FROM held WHERE NOT (${options.skipHeld} AND is_held)
        ), created AS (
          INSERT INTO jobs (kind, queue, args, max_attempts, unique_key, trace_parent)
          SELECT ${deliverKind}, ${queue}, jsonb_build_object('subscription', w.sub::text), ${maxAttempts},
                 ${round.name} || ':' || w.first || ':' || w.sub::text, r.trace_parent
          FROM wanted AS w LEFT JOIN read AS r ON r.seq = w.first
          ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL DO NOTHING
          RETURNING id
        ), wake AS MATERIALIZED (
          SELECT pg_notify('jobs', ${queue}) FROM (SELECT 1 FROM created LIMIT 1) AS one
        ), moved AS (
          UPDATE event_consumer_cursors SET last_seq = (SELECT to_seq FROM pos), updated_at = clock_timestamp()
          WHERE name = ${round.name} AND (SELECT ok FROM go)
        ), unflushed AS MATERIALIZED (
          SELECT set_config('synchronous_commit', 'off', true) WHERE NOT (SELECT ok FROM go)
        )
        SELECT p.after, p.head, p.head_epoch AS "headEpoch", p.events, p.to_seq AS "toSeq", p.is_full AS full,
               p.next_occurred_at AS "nextOccurredAt", g.ok,
               (SELECT count(*) FROM wanted)::int AS wanted, (SELECT count(*) FROM created)::int AS inserted,
               (SELECT count(*) FROM wake) + (SELECT count(*) FROM unflushed) + (SELECT count(*) FROM nudged) AS side_effects
        FROM pos AS p CROSS JOIN go AS g`
      const row = rows[0]
      if (row === undefined) return { _tag: "Locked" } as const
      if (row.events === 0 && row.head === row.after) return { _tag: "CaughtUp", lastSeq: row.after } as const
      if (!row.ok || row.toSeq === null) return undefined
      const suppressed = row.wanted - row.inserted
      if (suppressed > 0) yield* Metric.update(JobMetrics.insertSuppressed, suppressed)
      return {
        _tag: "Processed",
        fromSeq: row.after + 1n,
        toSeq: row.toSeq,
        events: row.events,
        jobs: row.inserted,
        suppressed,
        lost: [],
        full: row.full,
        head: { seq: row.head, epoch: row.headEpoch },
        nextOccurredAt: row.nextOccurredAt ?? undefined,
      } as const
    }).pipe(Effect.withSpan("WebhookFanOut.statementRound"))

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
    oneStatement: makeStatementRound(fanOutOptions),
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
