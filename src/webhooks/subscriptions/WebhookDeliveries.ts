/**
 * Reading the delivery history of a subscription: its deliveries by state and time (newest
 * first, a page at a time) and one delivery with every attempt. What an operator or an owner looks
 * at before re-sending anything (`DeliveryResend`).
 *
 * Pages go by delivery id, not offset: a page after `before` stays the same however many
 * deliveries the rounds add meanwhile. A delivery's event is shown while it is in the log
 * (`eventType`, `space` are null once retention removed it).
 */
import { Effect, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { eventAt } from "../../log/EventLog.ts"

export const deliveryStates = ["pending", "delivered", "dead"] as const
export type DeliveryState = (typeof deliveryStates)[number]

export interface DeliveryRecord {
  readonly id: bigint
  readonly subscriptionId: string
  readonly eventSeq: bigint
  readonly eventType: string | null
  readonly space: string | null
  readonly epoch: number
  /** Its number for the receiver; null until it is first sent (and for good when it never is). */
  readonly sequence: bigint | null
  readonly state: DeliveryState
  /** Why it ended without a 2xx: `permission`, `scope`, `stale`, `disabled:<cause>`. */
  readonly deadReason: string | null
  readonly attempts: number
  readonly lastStatus: number | null
  readonly lastErrorClass: string | null
  readonly lastAttemptAt: Date | null
  readonly createdAt: Date
  readonly finishedAt: Date | null
}

export interface AttemptRecord {
  readonly number: number
  readonly startedAt: Date
  readonly durationMs: number
  readonly status: number | null
  readonly errorClass: string | null
  readonly responseBody: string | null
  readonly responseTruncated: boolean
}

export class DeliveryNotFound extends Schema.TaggedError<DeliveryNotFound>()("DeliveryNotFound", {
  id: Schema.String,
}) {
  override get message() {
    return `no webhook delivery ${this.id}`
  }
}

export interface ListOptions {
  readonly subscriptionId: string
  readonly state?: DeliveryState | undefined
  /** Created at or after this time. */
  readonly since?: Date | undefined
  /** Created before this time. */
  readonly until?: Date | undefined
  /** Deliveries with an id below this (the previous page's `next`). */
  readonly before?: bigint | undefined
  readonly limit: number
}

const select = (sql: SqlClient.SqlClient) => sql`
  SELECT d.id, d.subscription_id::text AS "subscriptionId", d.event_seq AS "eventSeq", e.type AS "eventType",
         e.space_id AS space, d.epoch, d.sequence, d.state, d.dead_reason AS "deadReason", d.attempts,
         d.last_status AS "lastStatus", d.last_error_class AS "lastErrorClass", d.last_attempt_at AS "lastAttemptAt",
         d.created_at AS "createdAt", d.finished_at AS "finishedAt"
  FROM webhook_deliveries AS d
  LEFT JOIN ${eventAt(sql, sql`d.event_seq`, sql`d.event_at`)}`

/** One page of a subscription's deliveries, newest first, and the cursor of the next (`null` after the last). */
export const list = Effect.fn("WebhookDeliveries.list")(function* (options: ListOptions) {
  const sql = yield* SqlClient.SqlClient
  const rows = yield* sql<DeliveryRecord>`
    ${select(sql)}
    WHERE ${sql.and([
      sql`d.subscription_id = ${options.subscriptionId}::uuid`,
      options.state === undefined ? sql`true` : sql`d.state = ${options.state}`,
      options.since === undefined ? sql`true` : sql`d.created_at >= ${options.since}`,
      options.until === undefined ? sql`true` : sql`d.created_at < ${options.until}`,
      options.before === undefined ? sql`true` : sql`d.id < ${options.before}`,
    ])}
    ORDER BY d.id DESC LIMIT ${options.limit + 1}`
  const page = rows.slice(0, options.limit)
  return { deliveries: page, next: rows.length > options.limit ? page.at(-1)!.id : null }
})

/** One delivery and its attempts, oldest first. */
export const get = Effect.fn("WebhookDeliveries.get")(function* (id: bigint) {
  const sql = yield* SqlClient.SqlClient
  const [delivery] = yield* sql<DeliveryRecord>`${select(sql)} WHERE d.id = ${id}`
  if (delivery === undefined) return yield* new DeliveryNotFound({ id: String(id) })
  const attempts = yield* sql<AttemptRecord>`
    SELECT number, started_at AS "startedAt", duration_ms AS "durationMs", status, error_class AS "errorClass",
           response_body AS "responseBody", response_truncated AS "responseTruncated"
    FROM webhook_attempts WHERE delivery_id = ${id} ORDER BY number`
  return { delivery, attempts }
})
