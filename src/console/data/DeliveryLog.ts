/**
 * A subscription's delivery log as the console filters it: by state, event type, creation time
 * and a payload path's value, newest first, a page at a time by a `before` cursor (an event seq).
 *
 * How the scan is bounded: candidates are read newest first through the unique index
 * (subscription_id, event_seq), at most `scanLimit` of them per page (state and time are checked
 * on the way); only those candidates have their event looked up (one partition probe each,
 * `EventLog.eventAt`) and their type and payload compared. A page that found fewer than it wanted
 * in a full scan says where the scan stopped, and the next page goes on from there. The path is
 * never SQL text: it is checked here (`parsePath`) and bound as a JSON array of keys for `#>>`.
 */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"
import { eventAt } from "../../log/EventLog.ts"
import type { DeliveryState } from "../../webhooks/subscriptions/WebhookDeliveries.ts"

export interface LogFilter {
  readonly subscriptionId: string
  readonly state?: DeliveryState | undefined
  readonly type?: string | undefined
  readonly since?: Date | undefined
  readonly until?: Date | undefined
  /** Keys of a payload path (`parsePath`) and the text its value must equal. */
  readonly path?: { readonly keys: ReadonlyArray<string>; readonly value: string } | undefined
  /** Deliveries of events below this seq (the previous page's `next`). */
  readonly before?: bigint | undefined
}

export interface LogRow {
  readonly id: string
  readonly eventSeq: string
  readonly eventType: string | null
  readonly state: DeliveryState
  readonly deadReason: string | null
  readonly attempts: number
  readonly lastStatus: number | null
  readonly lastErrorClass: string | null
  readonly createdAt: string
}

export interface LogPage {
  readonly rows: ReadonlyArray<LogRow>
  /** The cursor of the next page; null after the last. */
  readonly next: bigint | null
}

/** Candidates read per page at most (see the header). */
export const scanLimit = 5000

const segment = /^(?:\.([A-Za-z_][A-Za-z0-9_-]*)|\[(\d{1,6})\])/

/**
 * The keys of a payload path such as `$.order.id` or `$.items[0].sku`; a string saying what is
 * wrong for anything else (at most 200 characters and 16 steps, names of letters, digits, `_`, `-`).
 */
export const parsePath = (path: string): ReadonlyArray<string> | string => {
  if (path.length > 200) return "The payload path is longer than 200 characters."
  if (!path.startsWith("$")) return "A payload path starts with $, as in $.order.id."
  const keys: Array<string> = []
  let rest = path.slice(1)
  while (rest.length > 0) {
    const m = segment.exec(rest)
    if (m === null) return `The payload path cannot be read at "${rest.slice(0, 20)}": use .name or [index] steps.`
    keys.push(m[1] ?? m[2]!)
    rest = rest.slice(m[0].length)
  }
  if (keys.length === 0) return "A payload path names at least one key, as in $.order.id."
  if (keys.length > 16) return "A payload path has at most 16 steps."
  return keys
}

/** The statement of one page (its text is kept in docs/sql/console-delivery-log.sql). */
export const statement = (sql: SqlClient.SqlClient, filter: LogFilter, limit: number) =>
  sql<{ scanned: number; oldest: string | null; rows: ReadonlyArray<LogRow> }>`
    WITH candidates AS (
      SELECT d.id, d.event_seq, d.event_at, d.state, d.dead_reason, d.attempts, d.last_status, d.last_error_class,
             d.created_at
      FROM webhook_deliveries AS d
      WHERE ${sql.and([
        sql`d.subscription_id = ${filter.subscriptionId}::uuid`,
        filter.before === undefined ? sql`true` : sql`d.event_seq < ${filter.before}`,
        filter.state === undefined ? sql`true` : sql`d.state = ${filter.state}`,
        filter.since === undefined ? sql`true` : sql`d.created_at >= ${filter.since}`,
        filter.until === undefined ? sql`true` : sql`d.created_at < ${filter.until}`,
      ])}
      ORDER BY d.event_seq DESC LIMIT ${scanLimit}
    ), matched AS (
      SELECT d.id::text AS id, d.event_seq::text AS "eventSeq", e.type AS "eventType", d.state,
             d.dead_reason AS "deadReason", d.attempts, d.last_status AS "lastStatus",
             d.last_error_class AS "lastErrorClass", d.created_at AS "createdAt"
      FROM candidates AS d
      LEFT JOIN ${eventAt(sql, sql`d.event_seq`, sql`d.event_at`)}
      WHERE ${sql.and([
        filter.type === undefined ? sql`true` : sql`e.type = ${filter.type}`,
        filter.path === undefined
          ? sql`true`
          : sql`e.payload #>> ARRAY(SELECT jsonb_array_elements_text(${JSON.stringify(filter.path.keys)}::jsonb))
                = ${filter.path.value}`,
      ])}
      ORDER BY d.event_seq DESC LIMIT ${limit + 1}
    )
    SELECT (SELECT count(*)::int FROM candidates) AS scanned, (SELECT min(event_seq)::text FROM candidates) AS oldest,
           coalesce((SELECT json_agg(m ORDER BY m."eventSeq"::bigint DESC) FROM matched AS m), '[]'::json) AS rows`

/** One page of at most `limit` deliveries matching `filter`, newest first. */
export const page = Effect.fn("DeliveryLog.page")(function* (filter: LogFilter, limit: number) {
  const sql = yield* SqlClient.SqlClient
  const [result] = yield* statement(sql, filter, limit)
  const { scanned, oldest, rows } = result!
  const shown = rows.slice(0, limit)
  const next =
    rows.length > limit
      ? BigInt(shown.at(-1)!.eventSeq)
      : scanned === scanLimit && oldest !== null
        ? BigInt(oldest)
        : null
  return { rows: shown, next } satisfies LogPage as LogPage
})
