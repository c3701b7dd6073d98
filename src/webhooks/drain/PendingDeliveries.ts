/**
 * The drainer's statements on a subscription's pending deliveries: the read of the next ones (with
 * subscription, event, scope and, when `Permissions` answers in SQL, the owner's right), and the
 * records of what happened to them (the attempts of requests that went out, deliveries that end
 * dead without a request). Each is one statement: the record of the 2xx answers so far goes with
 * the next read (`recordAndReadStatement`), so a busy subscription costs about one round trip per
 * read, not per delivery.
 *
 * A read only returns deliveries while the run's job holds the slot, so a run that lost it reads
 * nothing and ends. The subscription row is updated once per statement (`subscriptionCte`): its
 * progress and failing clock when attempts went on record, its numbering (`WebhookNumbering`)
 * when the read numbers what it found.
 */
import { Effect, Metric } from "effect"
import type { SqlClient } from "effect/sql"
import * as Jobs from "../../jobs/Jobs.ts"
import { eventIn } from "../../log/EventLog.ts"
import type * as OutboundSender from "../../outbound/OutboundSender.ts"
import { column } from "../../platform/SqlArrays.ts"
import * as OperationalEvents from "../subscriptions/OperationalEvents.ts"
import * as SubscriptionHealth from "../subscriptions/SubscriptionHealth.ts"
import * as WebhookMetrics from "../WebhookMetrics.ts"
import { type Drain, withSql } from "./Drain.ts"
import * as WebhookNumbering from "./WebhookNumbering.ts"
import { type FailingClock, noFailures } from "./WebhookSchedule.ts"

/** A pending delivery of a subscription as the read returns it, with everything needed to send it. */
export interface PendingDelivery {
  readonly deliveryId: bigint
  readonly eventSeq: bigint
  readonly epoch: number
  /** The number it goes out with; null when it is not to be sent, or another run renumbered meanwhile. */
  readonly sequence: bigint | null
  /** The number it had before this read (from an earlier one, whose request may have gone out). */
  readonly existing: bigint | null
  /** This run gave it its number, so it may give it back. */
  readonly numberedHere: boolean
  /** `numbered_by` as the read saw it. */
  readonly tokenSeen: string | null
  readonly attempts: number
  readonly state: "active" | "disabled"
  readonly disabledCause: string | null
  readonly startedSeq: bigint
  readonly owner: string
  readonly url: string
  readonly secretSealed: string
  readonly previousSecretSealed: string | null
  readonly previousSecretUntil: Date | null
  readonly failingFirstAt: Date | null
  readonly failingClockAt: Date | null
  /** Whether the subscription was degraded (`SubscriptionHealth`) as of this read. */
  readonly degraded: boolean
  /** Requests per second the subscription's endpoint may get (`SubscriptionOptions`), as of this read; null: no limit. */
  readonly rateLimit: number | null
  /** Extra request headers as stored, as of this read (`SubscriptionOptions.usable` makes them safe to send). */
  readonly headers: Readonly<Record<string, unknown>>
  /** The endpoint's OAuth2 client credentials (`EndpointCredentials`), as of this read; all null: none. */
  readonly authTokenUrl: string | null
  readonly authClientId: string | null
  readonly authSecretSealed: string | null
  readonly authScope: string | null
  /** The sealed client certificate and key; null: none. */
  readonly tlsClientSealed: string | null
  /** CA certificates (PEM) trusted instead of the system's; null: the system's. */
  readonly tlsCa: string | null
  readonly present: boolean
  /**
   * Not found, but its event's time lies outside the read's `EventWindow`, so the event may be
   * in the log all the same: the read is cut here and made again without the window.
   */
  readonly unsure: boolean
  readonly type: string | null
  readonly space: string | null
  readonly occurredAt: Date | null
  /** The event's trace (`TraceParent`): its delivery's attempt continues it. */
  readonly traceParent: string | null
  readonly payload: unknown
  readonly scoped: boolean
  /** Whether it can be sent as far as the row says (active, not a leftover, event present, in scope). */
  readonly sendable: boolean
  /** The owner's right on the space, when `Permissions` answers in SQL. */
  readonly allowed: boolean | null
}

/**
 * The time window a read looks its deliveries' events up in, as parameters: PostgreSQL then plans
 * (or starts) the lookup over the hour leaves of the window only, instead of setting up every leaf
 * of the log for each read (with 30 days kept, 1,057 leaves and tens of milliseconds a read).
 * A hint, never trusted: a delivery whose event is not found outside it is `unsure`, not gone.
 */
export interface EventWindow {
  readonly since: Date | null
  readonly until: Date | null
}

/** No window: the lookup sets up every leaf. */
export const anyTime: EventWindow = { since: null, until: null }

/**
 * The earliest event time of the next `limit` pending deliveries after `after` (null when one's is
 * unknown or none is pending), in one indexed read, and the database's clock.
 */
export const windowAfter = (sql: SqlClient.SqlClient, subscriptionId: string, after: bigint, limit: number) =>
  Effect.map(
    sql<{ since: Date | null; dbNow: Date }>`
      SELECT CASE WHEN bool_and(event_at IS NOT NULL) THEN min(event_at) END AS since, clock_timestamp() AS "dbNow"
      FROM (
        SELECT event_at FROM webhook_deliveries
        WHERE subscription_id = ${subscriptionId}::uuid AND state = 'pending' AND event_seq > ${after}
        ORDER BY event_seq LIMIT ${limit}
      ) AS d`,
    (rows) => rows[0]!,
  )

/** A request that went out and what came back; on record once `recordAttempts` has written it. */
export interface Sent {
  readonly delivery: PendingDelivery
  readonly started: number
  readonly answered: number
  readonly result: OutboundSender.SendResult
  readonly ok: boolean
}

/** A delivery's state once its attempt is on record. */
export type DeliveryState = "delivered" | "pending" | "dead"

/**
 * `pending` (the pending deliveries while this job holds the slot: up to `limit` after `after`, in
 * seq order; none when nothing is pending or the slot is lost) and `checked` (which of them may be
 * sent, `sendable`, and which are to be sent as far as this statement can tell, `go`).
 */
const pendingCtes = (
  drain: Pick<Drain, "sql" | "allowedColumn">,
  read: {
    readonly subscriptionId: string
    readonly job: bigint
    readonly attempt: number
    readonly after: bigint
    readonly limit: number
    readonly window: EventWindow
    /** The window's day partitions, to look the events up in (`EventLog.daysOfWindow`); `undefined`: `event_log`. */
    readonly days: ReadonlyArray<string> | undefined
  },
) => drain.sql`
  pending AS MATERIALIZED (
    SELECT d.id AS "deliveryId", d.event_seq AS "eventSeq", d.epoch, d.sequence AS existing, d.attempts,
           s.state, s.disabled_cause AS "disabledCause", s.started_seq AS "startedSeq", s.owner, s.url,
           s.secret_sealed AS "secretSealed", s.previous_secret_sealed AS "previousSecretSealed",
           s.previous_secret_until AS "previousSecretUntil",
           s.failing_first_at AS "failingFirstAt", s.failing_clock_at AS "failingClockAt",
           s.degraded_at IS NOT NULL AS degraded,
           s.numbered_by AS "tokenSeen", s.rate_limit AS "rateLimit", s.headers,
           s.auth_token_url AS "authTokenUrl", s.auth_client_id AS "authClientId",
           s.auth_client_secret_sealed AS "authSecretSealed", s.auth_scope AS "authScope",
           s.tls_client_sealed AS "tlsClientSealed", s.tls_ca AS "tlsCa",
           e.seq IS NOT NULL AS present, e.seq IS NULL AND ${outside(drain.sql, read.window)} AS unsure, e.type, e.space_id AS space, e.occurred_at AS "occurredAt", e.trace_parent AS "traceParent", e.payload,
           EXISTS (SELECT 1 FROM webhook_subscription_spaces AS ss
                   WHERE ss.subscription_id = s.id AND ss.space_id = e.space_id) AS scoped,
           ${drain.allowedColumn} AS allowed
    FROM webhook_drains AS w
    JOIN webhook_subscriptions AS s ON s.id = w.subscription_id
    CROSS JOIN LATERAL (
      SELECT * FROM webhook_deliveries
      WHERE subscription_id = w.subscription_id AND state = 'pending' AND event_seq > ${read.after}
      ORDER BY event_seq LIMIT ${read.limit}
    ) AS d
    LEFT JOIN ${eventIn(drain.sql, read.days, drain.sql`d.event_seq`, drain.sql`d.event_at`)}
      AND e.occurred_at >= coalesce(${read.window.since}::timestamptz, '-infinity')
      AND e.occurred_at <= coalesce(${read.window.until}::timestamptz, 'infinity')
    WHERE w.subscription_id = ${read.subscriptionId}::uuid AND w.job_id = ${read.job}
      -- A later attempt of the job runs elsewhere: this run is stale and must not send beside it.
      AND NOT ${Jobs.attemptedAfter(drain.sql, drain.sql`w.job_id`, read.attempt)}
  ), checked AS (
    -- Nothing from the first unsure delivery on is numbered (the read is cut there), nor anything
    -- behind a denied one: it is suppressed or checked again first, and should the run stop in
    -- between, a number behind it would stay (in doubt) while it took a higher one.
    SELECT "deliveryId", "eventSeq", existing, sendable,
           sendable AND coalesce(allowed, false)
             AND NOT bool_or(unsure OR (sendable AND NOT coalesce(allowed, false))) OVER (ORDER BY "eventSeq") AS go
    FROM (SELECT *, (state = 'active' AND "eventSeq" > "startedSeq" AND present AND scoped) AS sendable FROM pending) AS x
  )`

/**
 * Whether the event of `d` may lie outside `window` (its time unknown, or not wholly within):
 * `timeOf` looks in the millisecond of `d.event_at`.
 */
const outside = (sql: SqlClient.SqlClient, window: EventWindow) => sql`(
  CASE WHEN d.event_at IS NULL THEN ${window.since}::timestamptz IS NOT NULL OR ${window.until}::timestamptz IS NOT NULL
       ELSE date_trunc('milliseconds', d.event_at) < coalesce(${window.since}::timestamptz, '-infinity')
         OR date_trunc('milliseconds', d.event_at) + interval '1 millisecond' > coalesce(${window.until}::timestamptz, 'infinity')
  END)`

/**
 * `answers`, `attempt`, `delivered`: the attempts of `sent` (the answers the requests got), their
 * rows, and the deliveries' new states. A delivery that
 * is no longer pending (its subscription was disabled while the requests ran) gets the attempt
 * on record and nothing else.
 */
const attemptsCtes = (sql: SqlClient.SqlClient, sent: ReadonlyArray<Sent>) => sql`
  answers AS (
    SELECT * FROM unnest(
      ${sent.map((s) => s.delivery.deliveryId.toString())}::bigint[], ${sent.map((s) => s.delivery.attempts + 1)}::int[],
      ${sent.map((s) => new Date(s.started))}::timestamptz[], ${sent.map((s) => s.result.durationMs)}::int[],
      ${column(sent, (s) => s.result.status)}::int[], ${column(sent, (s) => s.result.errorClass)}::text[],
      ${sent.map((s) => s.result.body.replaceAll("\u0000", "\uFFFD"))}::text[],
      ${sent.map((s) => s.result.truncated)}::bool[], ${sent.map((s) => s.ok)}::bool[]
    ) WITH ORDINALITY AS a(delivery_id, number, started_at, duration_ms, status, error_class, body, truncated, ok, n)
  ), attempt AS (
    INSERT INTO webhook_attempts
      (delivery_id, number, started_at, duration_ms, status, error_class, response_body, response_truncated)
    SELECT delivery_id, number, started_at, duration_ms, status, error_class, body, truncated FROM answers
  ), delivered AS (
    UPDATE webhook_deliveries AS d
    SET attempts = d.attempts + 1, last_status = a.status, last_error_class = a.error_class,
        last_attempt_at = a.started_at,
        state = CASE WHEN a.ok AND d.state = 'pending' THEN 'delivered' ELSE d.state END,
        finished_at = CASE WHEN a.ok AND d.state = 'pending' THEN clock_timestamp() ELSE d.finished_at END
    FROM answers AS a WHERE d.id = a.delivery_id
    RETURNING d.id, d.state, d.event_seq
  )`

/** `progress`'s columns about the attempts in `delivered`: whether the subscription's progress moves, and how far. */
const progressOf = (sql: SqlClient.SqlClient, sent: ReadonlyArray<Sent>) =>
  sent.length === 0
    ? sql`false AS recorded, NULL::bigint AS delivered_to`
    : sql`EXISTS (SELECT 1 FROM delivered WHERE state IN ('delivered', 'pending')) AS recorded,
          (SELECT max(event_seq) FROM delivered WHERE state = 'delivered') AS delivered_to`

/** What the record statements need of the drainer's settings: how health is counted. */
type HealthConfig = { readonly config: Pick<Drain["config"], "health"> }

/** The health settings the drainer counts with. */
const healthOf = (drain: HealthConfig) => drain.config.health ?? SubscriptionHealth.healthDefaults

/**
 * `subscription AS (...)`: the statement's one UPDATE of the subscription row, after `progress`:
 * its progress, failing clock and health counts (`SubscriptionHealth.countedSql`) when
 * `progress.recorded`, its numbering (`WebhookNumbering.bump`) when `progress.numbering`.
 */
const subscriptionCte = (
  drain: Pick<Drain, "sql"> & HealthConfig,
  subscriptionId: string,
  failing: FailingClock,
  token: string | null,
  sent: ReadonlyArray<Sent>,
) => drain.sql`
  subscription AS (
    UPDATE webhook_subscriptions AS s
    SET last_delivered_seq = CASE WHEN progress.recorded THEN greatest(s.last_delivered_seq, progress.delivered_to)
                                  ELSE s.last_delivered_seq END,
        failing_first_at = CASE WHEN progress.recorded
                                THEN ${failing.firstAt === null ? null : new Date(failing.firstAt)}::timestamptz
                                ELSE s.failing_first_at END,
        failing_clock_at = CASE WHEN progress.recorded
                                THEN ${failing.clockAt === null ? null : new Date(failing.clockAt)}::timestamptz
                                ELSE s.failing_clock_at END,
        ${SubscriptionHealth.countedSql(drain.sql, drain.sql`progress.recorded`)},
        ${WebhookNumbering.bump(drain.sql, token)}
    FROM progress CROSS JOIN ${SubscriptionHealth.batchSql(drain.sql, healthOf(drain), SubscriptionHealth.countOf(sent))}
    WHERE s.id = ${subscriptionId}::uuid AND (progress.recorded OR progress.numbering)
    RETURNING s.last_sequence, ${WebhookNumbering.numbersHold(drain.sql, token)}
  )`

/** Puts the attempts of `sent` on record with the subscription's failing clock; their states come back in order. */
export const recordAttempts = (
  drain: Drain,
  subscriptionId: string,
  sent: ReadonlyArray<Sent>,
  failing: FailingClock,
) =>
  drain.sql<{ state: DeliveryState }>`
    WITH ${attemptsCtes(drain.sql, sent)}, progress AS (
      SELECT ${progressOf(drain.sql, sent)}, false AS numbering, 0 AS fresh, NULL::uuid AS token_seen
    ), ${subscriptionCte(drain, subscriptionId, failing, null, sent)}
    SELECT delivered.state FROM answers JOIN delivered ON delivered.id = answers.delivery_id ORDER BY answers.n`.pipe(
    Effect.map((rows) => sent.map((_, i) => rows[i]?.state ?? "dead")),
    Effect.tap(() => drain.onRecorded(subscriptionId)),
    Effect.withSpan("WebhookDrainer.recordAttempts", { attributes: { "webhook.deliveries": sent.length } }),
  )

/**
 * Puts the 2xx `sent` on record, reads the next pending deliveries after `after` and numbers those
 * it finds sendable and allowed, in one statement (its read sees the log as before its own record,
 * hence `after`, at least the last seq sent). `token` (none when rights are asked afterwards):
 * what `numbered_by` becomes if its numbers hold.
 */
export const recordAndReadStatement = (
  drain: Pick<Drain, "sql" | "allowedColumn"> & HealthConfig,
  read: Parameters<typeof pendingCtes>[1],
  sent: ReadonlyArray<Sent>,
  token: string | null,
) => {
  const sql = drain.sql
  return sql<PendingDelivery & { readonly numbered: boolean }>`
    WITH ${sent.length === 0 ? sql`` : sql`${attemptsCtes(sql, sent)},`}
    ${pendingCtes(drain, read)}, progress AS (
      SELECT ${progressOf(sql, sent)}, ${token === null ? sql`false` : sql`coalesce(bool_or(go), false)`} AS numbering,
             (count(*) FILTER (WHERE go AND existing IS NULL))::int AS fresh,
             (SELECT "tokenSeen" FROM pending LIMIT 1) AS token_seen
      FROM checked
    ), ${subscriptionCte(drain, read.subscriptionId, noFailures, token, sent)}, fresh AS (
      SELECT "deliveryId" AS delivery_id, row_number() OVER (ORDER BY "eventSeq") AS rank
      FROM checked WHERE go AND existing IS NULL
    ), ${WebhookNumbering.numbered(sql)}
    SELECT pending.*, checked.sendable,
           CASE WHEN checked.go AND coalesce((SELECT subscription.numbered FROM subscription), false)
                THEN coalesce(numbered.sequence, pending.existing) END
             AS sequence,
           numbered.id IS NOT NULL AS "numberedHere",
           coalesce((SELECT subscription.numbered FROM subscription), false) AS numbered
    FROM pending JOIN checked USING ("deliveryId") LEFT JOIN numbered ON numbered.id = pending."deliveryId"
    ORDER BY pending."eventSeq"`
}

/**
 * Judges the subscription's health after `sent` went on record (`SubscriptionHealth.judge`), where
 * a change can happen: after a failure, or after answers of a subscription that was degraded.
 */
export const judgeHealth = (drain: Drain, subscriptionId: string, sent: ReadonlyArray<Sent>) => {
  const last = sent.at(-1)
  return last !== undefined && (!last.ok || sent.some((s) => s.delivery.degraded))
    ? withSql(
        drain,
        SubscriptionHealth.judge(healthOf(drain), subscriptionId, last.answered, last.result.status ?? null),
      ).pipe(Effect.asVoid)
    : Effect.void
}

/** Ends pending deliveries that must not go out: the subscription is disabled, or they predate its re-enabling. */
export const endLeftovers = (sql: SqlClient.SqlClient, subscriptionId: string, d: PendingDelivery) =>
  d.state !== "active"
    ? sql`
        UPDATE webhook_deliveries
        SET state = 'dead', dead_reason = ${`disabled:${d.disabledCause ?? "manual"}`}, finished_at = clock_timestamp()
        WHERE subscription_id = ${subscriptionId}::uuid AND state = 'pending'`
    : sql`
        UPDATE webhook_deliveries SET state = 'dead', dead_reason = 'stale', finished_at = clock_timestamp()
        WHERE subscription_id = ${subscriptionId}::uuid AND state = 'pending' AND event_seq <= ${d.startedSeq}`

// One counter per outcome, made once: `withAttributes` builds a new metric key on every call.
const attemptCounters = new Map<string, Effect.Effect<void>>()

export const attemptsBy = (outcome: string): Effect.Effect<void> => {
  let update = attemptCounters.get(outcome)
  if (update === undefined) {
    update = Metric.update(Metric.withAttributes(WebhookMetrics.attempts, { outcome }), 1)
    attemptCounters.set(outcome, update)
  }
  return update
}

/**
 * Dead without a request; `last_delivered_seq` moves past it so it never blocks the queue. Its
 * `bothy.delivery.dead` event (`OperationalEvents`) is appended in the same transaction.
 */
export const suppress = (drain: Drain, subscriptionId: string, d: PendingDelivery, reason: "permission" | "scope") =>
  Effect.gen(function* () {
    const report = OperationalEvents.reportsDeath(d.type)
    yield* drain.sql.withTransaction(
      Effect.gen(function* () {
        const died = yield* drain.sql<{ owner: string }>`
          WITH dead AS (
            UPDATE webhook_deliveries SET state = 'dead', dead_reason = ${reason}, finished_at = clock_timestamp()
            WHERE id = ${d.deliveryId} AND state = 'pending'
            RETURNING event_seq
          )
          UPDATE webhook_subscriptions AS s SET last_delivered_seq = greatest(s.last_delivered_seq, dead.event_seq)
          FROM dead WHERE s.id = ${subscriptionId}::uuid
          RETURNING s.owner`
        if (!report || died.length === 0) return
        yield* withSql(
          drain,
          OperationalEvents.append([
            OperationalEvents.deadDeliveryEvent({
              subscription: subscriptionId,
              owner: died[0]!.owner,
              delivery: String(d.deliveryId),
              eventSeq: String(d.eventSeq),
              space: d.space ?? "",
              reason,
            }),
          ]),
        )
      }),
    )
    yield* drain.onRecorded(subscriptionId)
    yield* Metric.update(WebhookMetrics.suppressed, 1)
    yield* attemptsBy("suppressed")
  })
