/**
 * The event a delivery carries, for its console page: found by seq and time in one partition
 * (`EventLog.eventAt`); none once retention dropped it.
 */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"
import { eventAt } from "../../log/EventLog.ts"

export interface DeliveryEvent {
  readonly seq: bigint
  readonly type: string
  readonly space: string
  readonly occurredAt: Date
  readonly payload: unknown
}

export const of = Effect.fn("DeliveryEvent.of")(function* (deliveryId: bigint) {
  const sql = yield* SqlClient.SqlClient
  const [event] = yield* sql<DeliveryEvent>`
    SELECT e.seq, e.type, e.space_id AS space, e.occurred_at AS "occurredAt", e.payload
    FROM webhook_deliveries AS d JOIN ${eventAt(sql, sql`d.event_seq`, sql`d.event_at`)}
    WHERE d.id = ${deliveryId}`
  return event
})
