/**
 * The subscriptions page's rows: each subscription the viewer may see (all for the operator, its
 * own for a principal), worst first, with its health over the last 24 hours read from its attempts.
 *
 * Bounded: the attempts are read through `webhook_attempts_started` (started_at) for 24 hours only,
 * whatever the history kept; each subscription's oldest pending delivery is one probe of the
 * pending index (as `WebhookStatus` does); at most `limit` rows come back.
 */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"
import type * as WebhookStatus from "../../webhooks/WebhookStatus.ts"

/** One hour of the last 24: attempts answered 2xx and the others, `hoursAgo` 0 is the current hour. */
export interface Hour {
  readonly hoursAgo: number
  readonly delivered: number
  readonly failed: number
}

/**
 * A subscription as `WebhookStatus` shows it, with its last 24 hours. `lastStatus` and
 * `lastErrorClass` are its newest attempt's, whichever delivery: not those of `pending` there.
 */
export interface HealthRow
  extends Pick<WebhookStatus.SubscriptionStatus, "id" | "owner" | "url" | "state" | "cause" | "degradedSince"> {
  /** Attempts over the last 24 h, and how many were answered 2xx. */
  readonly attempts: number
  readonly succeeded: number
  readonly p95Ms: number | null
  readonly lastStatus: number | null
  readonly lastErrorClass: string | null
  /** Seconds since the event of its oldest pending delivery was committed; null: none pending. */
  readonly oldestPendingSeconds: number | null
  readonly hours: ReadonlyArray<Hour>
}

/** Up to `limit` subscriptions of `owner` (all for `undefined`): disabled, degraded, least successful, oldest pending first. */
export const list = Effect.fn("SubscriptionHealthList.list")(function* (owner: string | undefined, limit: number) {
  const sql = yield* SqlClient.SqlClient
  const mine = owner === undefined ? sql`true` : sql`s.owner = ${owner}`
  return yield* sql<HealthRow>`
    WITH recent AS (
      SELECT d.subscription_id, a.started_at, a.duration_ms, a.status, a.error_class,
             a.status BETWEEN 200 AND 299 AS ok,
             floor(extract(epoch FROM clock_timestamp() - a.started_at) / 3600)::int AS hours_ago
      FROM webhook_attempts AS a JOIN webhook_deliveries AS d ON d.id = a.delivery_id
      JOIN webhook_subscriptions AS s ON s.id = d.subscription_id
      WHERE a.started_at >= clock_timestamp() - interval '24 hours' AND ${mine}
    ), health AS (
      SELECT subscription_id, count(*)::int AS attempts, (count(*) FILTER (WHERE ok))::int AS succeeded,
             percentile_cont(0.95) WITHIN GROUP (ORDER BY duration_ms)::float8 AS p95,
             (array_agg(status ORDER BY started_at DESC))[1] AS last_status,
             (array_agg(error_class ORDER BY started_at DESC))[1] AS last_error_class
      FROM recent GROUP BY subscription_id
    ), hourly AS (
      SELECT subscription_id, json_agg(json_build_object('hoursAgo', hours_ago, 'delivered', delivered,
               'failed', failed) ORDER BY hours_ago) AS hours
      FROM (SELECT subscription_id, least(hours_ago, 23) AS hours_ago, (count(*) FILTER (WHERE ok))::int AS delivered,
                   (count(*) FILTER (WHERE NOT coalesce(ok, false)))::int AS failed
            FROM recent GROUP BY 1, 2) AS by_hour
      GROUP BY subscription_id
    )
    SELECT s.id::text AS id, s.owner, s.url, s.state, s.disabled_cause AS cause, s.degraded_at AS "degradedSince",
           coalesce(h.attempts, 0) AS attempts, coalesce(h.succeeded, 0) AS succeeded, h.p95 AS "p95Ms",
           h.last_status AS "lastStatus", h.last_error_class AS "lastErrorClass", p.age AS "oldestPendingSeconds",
           coalesce(hr.hours, '[]'::json) AS hours
    FROM webhook_subscriptions AS s
    LEFT JOIN health AS h ON h.subscription_id = s.id
    LEFT JOIN hourly AS hr ON hr.subscription_id = s.id
    LEFT JOIN LATERAL (
      SELECT GREATEST(0, extract(epoch FROM clock_timestamp() - COALESCE(d.event_at, d.created_at)))::float8 AS age
      FROM webhook_deliveries AS d
      WHERE d.subscription_id = s.id AND d.state = 'pending'
      ORDER BY d.event_seq LIMIT 1) AS p ON true
    WHERE ${mine}
    ORDER BY s.state = 'disabled' DESC, s.degraded_at IS NOT NULL DESC,
             coalesce(h.succeeded::float8 / nullif(h.attempts, 0), 1), p.age DESC NULLS LAST, s.created_at, s.id
    LIMIT ${limit}`
})
