/**
 * The pull feed of a subscription: the messages its pushes carried, in `sequence` order, with the
 * very `webhook-id`s and bodies, for a receiver that lost some and fills the gap exactly.
 *
 * What it keeps true:
 * - It numbers nothing: it reads what the drainer numbered, and only numbers that are settled, those
 *   whose delivery has an attempt on record (its request went out, or may have). A number handed out
 *   and not yet sent can still be given back and handed to another delivery (`WebhookNumbering`), so
 *   showing it could show one id with two bodies; the page ends before the first unsettled number.
 * - The body is rebuilt, not stored: `WebhookEnvelope.body` is a function of the event (read from
 *   the log, bounded by the delivery's event time, through `EventLog.eventAt`) and the numbering, the
 *   same function and the same decoding of the row the drainer used, so the bytes are the pushed ones.
 * - Pages are gap-free: a page ends before the first entry that does not follow the one before it
 *   (a hole in the delivery history, an event that left the log). A request whose very next entry is
 *   gone is `FeedPastRetention`, naming the lowest position still held.
 * - A delivery that went out and was then ended for a right revoked or a space out of scope keeps its
 *   place (so the receiver sees no gap) with its body withheld.
 *
 * Order: numbers follow seq order within a database, and a restore's new epoch numbers on from the
 * backup's counter, so `sequence` order is (epoch, sequence) order. A receiver ahead of a restored
 * database (it saw numbers the restore undid) asks after a position in the old epoch above every
 * number the database holds there; the read then starts below it, where the new epoch begins.
 */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"
import { eventAt, oldestSeq } from "../../log/EventLog.ts"
import * as FeedWire from "../../receiver/FeedWire.ts"
import { body } from "../drain/WebhookEnvelope.ts"
import { messageId, unixSeconds } from "../drain/WebhookSignature.ts"

/** Entries a page may hold. */
export const maxLimit = 500

interface Row {
  readonly epoch: number
  readonly sequence: bigint
  readonly attempts: number
  readonly state: string
  readonly deadReason: string | null
  readonly present: boolean
  readonly type: string | null
  readonly space: string | null
  readonly occurredAt: Date | null
  readonly payload: unknown
  readonly sentAt: Date | null
}

/**
 * Up to `limit` numbered deliveries after `after`, in sequence order, with their events. The lower
 * bound is `after`'s sequence unless the delivery at or below it is of a later epoch (a restore
 * undid what the receiver saw): then the read starts from the bottom and the row comparison skips.
 */
export const pageStatement = (
  sql: SqlClient.SqlClient,
  subscriptionId: string,
  after: FeedWire.Position,
  limit: number,
) =>
  sql<Row>`
    WITH bound AS (
      SELECT CASE WHEN coalesce((
        SELECT epoch FROM webhook_deliveries
        WHERE subscription_id = ${subscriptionId}::uuid AND sequence <= ${after.sequence}::bigint
        ORDER BY sequence DESC LIMIT 1
      ) > ${after.epoch}::int, false) THEN 0::bigint ELSE ${after.sequence}::bigint END AS above
    )
    SELECT d.epoch, d.sequence, d.attempts, d.state, d.dead_reason AS "deadReason", e.seq IS NOT NULL AS present,
           e.type, e.space_id AS space, e.occurred_at AS "occurredAt", e.payload,
           (SELECT a.started_at FROM webhook_attempts AS a WHERE a.delivery_id = d.id ORDER BY a.number LIMIT 1)
             AS "sentAt"
    FROM (
      SELECT * FROM webhook_deliveries
      WHERE subscription_id = ${subscriptionId}::uuid AND sequence > (SELECT above FROM bound)
        AND (epoch, sequence) > (${after.epoch}::int, ${after.sequence}::bigint)
      ORDER BY sequence LIMIT ${limit}
    ) AS d
    LEFT JOIN ${eventAt(sql, sql`d.event_seq`, sql`d.event_at`)}
    ORDER BY d.sequence`

/** The lowest settled position after `after` whose event the log still holds; undefined: none. */
const lowestAfter = (sql: SqlClient.SqlClient, subscriptionId: string, after: FeedWire.Position) =>
  Effect.map(
    sql<{ epoch: number; sequence: bigint }>`
      SELECT epoch, sequence FROM webhook_deliveries
      WHERE subscription_id = ${subscriptionId}::uuid AND sequence IS NOT NULL AND attempts > 0
        AND (epoch, sequence) > (${after.epoch}::int, ${after.sequence}::bigint) AND event_seq >= ${oldestSeq(sql)}
      ORDER BY sequence LIMIT 1`,
    (rows): FeedWire.Position | undefined => rows[0],
  )

const withheldReasons = new Set(["permission", "scope"])

const entry = (subscriptionId: string, row: Row): FeedWire.FeedEntry => {
  const withheld = row.state === "dead" && withheldReasons.has(row.deadReason ?? "")
  return {
    id: messageId(row.epoch, subscriptionId, row.sequence),
    epoch: row.epoch,
    sequence: row.sequence.toString(),
    timestamp: row.sentAt === null ? null : String(unixSeconds(row.sentAt)),
    body: withheld ? null : body(row, row.sequence),
    withheld: withheld ? (row.deadReason as "permission" | "scope") : null,
  }
}

/** The rows of a page that can be shown: settled, with their event, each following the one before. */
const shown = (after: FeedWire.Position, rows: ReadonlyArray<Row>) => {
  const out: Array<Row> = []
  let at = after
  for (const row of rows) {
    if (row.attempts === 0 || !row.present || !FeedWire.follows(at, row)) break
    out.push(row)
    at = row
  }
  return out
}

/** Position 0.0: before everything. */
const start: FeedWire.Position = { epoch: 0, sequence: 0n }

/**
 * A page of the feed of `subscriptionId` (whose access the caller checked): up to `limit` entries
 * after `after`, or from the lowest position still held when `after` is undefined.
 */
export const page = Effect.fn("WebhookFeed.page")(function* (
  subscriptionId: string,
  after: FeedWire.Position | undefined,
  limit: number,
) {
  const sql = yield* SqlClient.SqlClient
  let from = after
  if (from === undefined) {
    const lowest = yield* lowestAfter(sql, subscriptionId, start)
    from = lowest === undefined ? start : { epoch: lowest.epoch, sequence: lowest.sequence - 1n }
  }
  const rows = yield* pageStatement(sql, subscriptionId, from, Math.min(Math.max(limit, 1), maxLimit))
  const first = rows[0]
  const gone =
    after !== undefined &&
    first !== undefined &&
    first.attempts > 0 &&
    (!first.present || (first.epoch === after.epoch && first.sequence > after.sequence + 1n))
  if (gone) {
    const lowest = yield* lowestAfter(sql, subscriptionId, after)
    return yield* new FeedWire.FeedPastRetention({
      subscription: subscriptionId,
      after: FeedWire.format(after),
      lowest: lowest === undefined ? null : FeedWire.format(lowest),
    })
  }
  const items = shown(from, rows).map((row) => entry(subscriptionId, row))
  const last = items.at(-1)
  return {
    items,
    next: last === undefined ? (after === undefined ? null : FeedWire.format(after)) : `${last.epoch}.${last.sequence}`,
  } satisfies FeedWire.FeedPage
})
