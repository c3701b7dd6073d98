/**
 * What `bothy status` and the status page show of webhooks, read from this part's own tables:
 * subscriptions by state, the ones that need a look, the oldest pending delivery, the newest
 * attempts. `ops/Status.ts` composes them with the other parts' figures.
 */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"

export interface SubscriptionGroup {
  readonly state: string
  /** `null` for active subscriptions. */
  readonly cause: string | null
  readonly count: number
  /** Of them, how many are degraded (`SubscriptionHealth`): still delivering, failing above the threshold. */
  readonly degraded: number
  /** Seconds since the event of the group's oldest pending delivery was committed; `null`: none pending. */
  readonly oldestPendingSeconds: number | null
}

export interface PendingDelivery {
  readonly subscription: string
  readonly eventSeq: bigint
  readonly ageSeconds: number
}

/**
 * Each subscription's first pending delivery (its oldest: deliveries go out in seq order), found
 * through the index of pending deliveries; `d` names the delivery for the caller's columns.
 */
const firstPending = (sql: SqlClient.SqlClient) => sql`
  LEFT JOIN LATERAL (
    SELECT d.event_seq, d.attempts, d.last_status, d.last_error_class,
           GREATEST(0, extract(epoch FROM clock_timestamp() - COALESCE(d.event_at, d.created_at)))::float8 AS age
    FROM webhook_deliveries AS d
    WHERE d.subscription_id = s.id AND d.state = 'pending'
    ORDER BY d.event_seq LIMIT 1) AS p ON true`

/** Subscriptions by state and cause, with the age of each group's oldest pending delivery. */
export const groups = (sql: SqlClient.SqlClient) => sql<SubscriptionGroup>`
  SELECT s.state, s.disabled_cause AS cause, count(*)::int AS count,
         (count(*) FILTER (WHERE s.degraded_at IS NOT NULL))::int AS degraded, max(p.age) AS "oldestPendingSeconds"
  FROM webhook_subscriptions AS s ${firstPending(sql)}
  GROUP BY s.state, s.disabled_cause ORDER BY s.state, s.disabled_cause NULLS FIRST`

/** The oldest pending delivery of all, by when it was created (none: empty). */
export const oldestPending = (sql: SqlClient.SqlClient) => sql<PendingDelivery>`
  SELECT d.subscription_id::text AS subscription, d.event_seq AS "eventSeq",
         GREATEST(0, extract(epoch FROM clock_timestamp() - COALESCE(d.event_at, d.created_at)))::float8
           AS "ageSeconds"
  FROM webhook_deliveries AS d
  WHERE d.state = 'pending'
  ORDER BY d.created_at, d.id LIMIT 1`

export interface SubscriptionStatus {
  readonly id: string
  readonly owner: string
  readonly url: string
  readonly state: string
  readonly cause: string | null
  /** Since when it is degraded (`SubscriptionHealth`); null: healthy. */
  readonly degradedSince: Date | null
  /** The oldest pending delivery: its event's seq, age in seconds, attempts so far and last outcome. */
  readonly pending: {
    readonly eventSeq: bigint
    readonly ageSeconds: number
    readonly attempts: number
    readonly lastStatus: number | null
    readonly lastErrorClass: string | null
  } | null
}

/**
 * Up to `limit` subscriptions, those that need a look first: disabled ones, degraded ones, then the oldest
 * pending delivery first. Every subscription is weighed (one index probe each), `limit` returned.
 */
export const subscriptionList = Effect.fn("Status.subscriptionList")(function* (limit: number) {
  const sql = yield* SqlClient.SqlClient
  const rows = yield* sql<{
    id: string
    owner: string
    url: string
    state: string
    cause: string | null
    degradedSince: Date | null
    eventSeq: bigint | null
    ageSeconds: number | null
    attempts: number | null
    lastStatus: number | null
    lastErrorClass: string | null
  }>`
    SELECT s.id::text AS id, s.owner, s.url, s.state, s.disabled_cause AS cause, s.degraded_at AS "degradedSince",
           p.event_seq AS "eventSeq", p.age AS "ageSeconds", p.attempts, p.last_status AS "lastStatus",
           p.last_error_class AS "lastErrorClass"
    FROM webhook_subscriptions AS s ${firstPending(sql)}
    ORDER BY s.state = 'disabled' DESC, s.degraded_at IS NOT NULL DESC, p.age DESC NULLS LAST, s.created_at, s.id
    LIMIT ${limit}`
  return rows.map(
    ({ eventSeq, ageSeconds, attempts, lastStatus, lastErrorClass, ...s }): SubscriptionStatus => ({
      ...s,
      pending:
        eventSeq === null
          ? null
          : { eventSeq, ageSeconds: ageSeconds ?? 0, attempts: attempts ?? 0, lastStatus, lastErrorClass },
    }),
  )
})

export interface AttemptStatus {
  readonly deliveryId: bigint
  readonly number: number
  readonly startedAt: Date
  readonly durationMs: number
  /** The HTTP status, or `null` when no response came (`errorClass` says why). */
  readonly status: number | null
  readonly errorClass: string | null
  /** The start of the response body the receiver sent (at most 200 characters). */
  readonly responseBody: string | null
  readonly subscription: string
  readonly url: string
  readonly eventSeq: bigint
  readonly deliveryState: string
}

/**
 * The newest attempts, up to `limit`, by when they started, newest first: a retry of an old
 * delivery is as recent as it is, not filed behind the later deliveries' first attempts. The
 * index on `started_at` (migration 0020) makes it `limit` rows whatever the history's size; ties
 * go to the later delivery and attempt.
 */
export const recentAttempts = Effect.fn("Status.recentAttempts")(function* (limit: number) {
  const sql = yield* SqlClient.SqlClient
  return yield* sql<AttemptStatus>`
    SELECT a.delivery_id AS "deliveryId", a.number, a.started_at AS "startedAt", a.duration_ms AS "durationMs",
           a.status, a.error_class AS "errorClass", left(a.response_body, 200) AS "responseBody",
           d.subscription_id::text AS subscription, s.url, d.event_seq AS "eventSeq", d.state AS "deliveryState"
    FROM (
      SELECT * FROM webhook_attempts ORDER BY started_at DESC, delivery_id DESC, number DESC LIMIT ${limit}
    ) AS a
    JOIN webhook_deliveries AS d ON d.id = a.delivery_id
    JOIN webhook_subscriptions AS s ON s.id = d.subscription_id
    ORDER BY a.started_at DESC, a.delivery_id DESC, a.number DESC`
})
