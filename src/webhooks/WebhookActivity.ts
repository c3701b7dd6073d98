/**
 * What webhooks did minute by minute since a time, for the console's overview: deliveries finished
 * (delivered, dead) with the latency of the delivered ones, and attempts that failed.
 *
 * Latency is the one a receiver's owner feels: from the event's commit (`event_at`, the delivery's
 * creation for rows from before it was kept) to the 2xx that finished the delivery, retries and
 * queueing included, as `bothy.webhooks.delivery_latency_seconds` measures it. An attempt's own
 * `duration_ms` is only the receiver's answer time.
 *
 * Both reads go through an index on their time (`webhook_deliveries_finished`,
 * `webhook_attempts_started`), so they cost the window's rows, not the tables'.
 */
import type { SqlClient } from "effect/sql"
import * as MinuteBuckets from "../platform/MinuteBuckets.ts"

export interface FinishedInMinute {
  /** The minute's start, in Unix seconds. */
  readonly minute: number
  readonly delivered: number
  readonly dead: number
  /** Milliseconds from the event's commit to the 2xx, over the minute's delivered; null: none. */
  readonly p50: number | null
  readonly p95: number | null
}

/** Deliveries finished per minute since `since` (empty minutes are absent). */
export const finishedPerMinute = (sql: SqlClient.SqlClient, since: Date) =>
  sql<FinishedInMinute>`
    WITH finished AS (
      SELECT ${MinuteBuckets.startOf(sql, sql`finished_at`)} AS minute, state,
             extract(epoch FROM finished_at - COALESCE(event_at, created_at)) * 1000 AS latency
      FROM webhook_deliveries WHERE state <> 'pending' AND finished_at >= ${since}::timestamptz
    )
    SELECT minute,
           (count(*) FILTER (WHERE state = 'delivered'))::int AS delivered,
           (count(*) FILTER (WHERE state = 'dead'))::int AS dead,
           (percentile_cont(0.5) WITHIN GROUP (ORDER BY latency) FILTER (WHERE state = 'delivered'))::float8 AS p50,
           (percentile_cont(0.95) WITHIN GROUP (ORDER BY latency) FILTER (WHERE state = 'delivered'))::float8 AS p95
    FROM finished GROUP BY minute ORDER BY minute`

export interface FailedInMinute {
  readonly minute: number
  readonly failed: number
}

/** Attempts per minute since `since` that got no 2xx (another status, or no answer at all). */
export const failedAttemptsPerMinute = (sql: SqlClient.SqlClient, since: Date) =>
  sql<FailedInMinute>`
    SELECT ${MinuteBuckets.startOf(sql, sql`started_at`)} AS minute, count(*)::int AS failed
    FROM webhook_attempts
    WHERE started_at >= ${since}::timestamptz AND (status IS NULL OR status NOT BETWEEN 200 AND 299)
    GROUP BY 1 ORDER BY 1`

/**
 * Pending deliveries, counted up to `cap` through the index of pending deliveries (a backlog of
 * millions is "more than `cap`", not a long count); `cap + 1` means more.
 */
export const pendingUpTo = (sql: SqlClient.SqlClient, cap: number) =>
  sql<{ pending: number }>`
    SELECT count(*)::int AS pending
    FROM (SELECT 1 FROM webhook_deliveries WHERE state = 'pending' LIMIT ${cap + 1}) AS capped`
