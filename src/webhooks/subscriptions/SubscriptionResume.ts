/**
 * Re-enabling a disabled subscription (after a `gap`, say): from the head of the log (what it
 * missed while disabled is not sent), or from a seq still in the log (what it missed from there on
 * is sent, in seq order, before anything newer).
 *
 * What it keeps true: every event from the chosen start on that matches the subscription gets
 * exactly one delivery, whether the `webhooks` consumer had read it before the re-enabling or reads
 * it after. The change runs under the `webhooks` cursor's lock (`ConsumerCursors.lock`), so it falls
 * between two rounds: the events up to the cursor are this module's, the ones after it the next
 * round's, which sees the subscription active from its start.
 *
 * From a seq `s` (the events with seq >= s), up to the cursor:
 * - an event without a delivery for the subscription (it was disabled when the round read it) gets
 *   one; a delivery that ended because the subscription was disabled, or as a leftover of an
 *   earlier re-enabling (`disabled:*`, `stale`), is pending again, with its number if it had one
 *   (a request under it may have gone out: it goes again under the same `webhook-id`);
 * - delivered ones, and ones suppressed for a right or the scope, stay as they are;
 * - a delivery without a number carries the current epoch (`WebhookEpoch`);
 * - a drain job is created unless a live one holds the subscription's slot (`DrainSlot`).
 * A seq that left the log (retention) is refused, naming the oldest seq kept; so is one after the
 * head. The numbering goes on: the receiver sees the next `sequence` numbers, for older events.
 */
import { Effect, Schema } from "effect"
import { SqlClient } from "effect/sql"
import * as ConsumerCursors from "../../consumer/ConsumerCursors.ts"
import * as Jobs from "../../jobs/Jobs.ts"
import * as EventLog from "../../log/EventLog.ts"
import { deliverKind, maxAttempts, queue } from "../drain/DrainJob.ts"
import { heldCtes, lockedCte } from "../drain/DrainSlot.ts"
import { currentEpoch } from "../WebhookEpoch.ts"
import * as WebhookFanOut from "../WebhookFanOut.ts"
import { takesSql } from "./SubscriptionRows.ts"

/** The consumer whose cursor decides which events a re-enabling covers (`WebhookFanOut.name`). */
const consumer = WebhookFanOut.name

export class SeqNotInLog extends Schema.TaggedError<SeqNotInLog>()("SeqNotInLog", {
  subscription: Schema.String,
  seq: Schema.BigInt,
  /** The oldest seq the log still holds; null when it holds none. */
  oldestKept: Schema.NullOr(Schema.BigInt),
  head: Schema.BigInt,
}) {
  override get message() {
    const why =
      this.seq > this.head
        ? `it is after the head of the log (${this.head})`
        : this.oldestKept === null
          ? "the log holds no event (retention removed them all)"
          : `it left the log (retention); the oldest seq kept is ${this.oldestKept}`
    return `webhook subscription ${this.subscription} cannot be enabled from seq ${this.seq}: ${why}`
  }
}

/** What enabling did: `Enabled`, it receives the events after `after`; or nothing. */
export type Resumed =
  | {
      readonly _tag: "Enabled"
      readonly after: bigint
      /** Deliveries created or made pending again for events the consumer had read already. */
      readonly deliveries: number
    }
  | { readonly _tag: "AlreadyActive" }
  | { readonly _tag: "NotFound" }

/** The subscription's state, its row locked until the caller commits. */
const lockState = (sql: SqlClient.SqlClient, id: string) =>
  sql<{ state: "active" | "disabled" }>`SELECT state FROM webhook_subscriptions WHERE id = ${id}::uuid FOR UPDATE`.pipe(
    Effect.map(([row]) => row?.state),
  )

const bounds = (sql: SqlClient.SqlClient) =>
  sql<{ head: bigint; oldest: bigint | null }>`
    SELECT ${EventLog.headSeq(sql)} AS head, ${EventLog.oldestSeq(sql)} AS oldest`.pipe(Effect.map(([row]) => row!))

/** Active again, receiving the events after `after`. */
const activate = (sql: SqlClient.SqlClient, id: string, after: bigint) =>
  sql`
    UPDATE webhook_subscriptions
    SET state = 'active', disabled_cause = NULL, disabled_at = NULL, started_seq = ${after},
        last_delivered_seq = greatest(last_delivered_seq, ${after}), failing_first_at = NULL, failing_clock_at = NULL
    WHERE id = ${id}::uuid`

/** The deliveries of `id` for the events in [`from`, `to`], and its drain job (see the header). */
const catchUp = (sql: SqlClient.SqlClient, id: string, from: bigint, to: bigint) =>
  Effect.gen(function* () {
    const [row] = yield* sql<{ revived: number; created: number }>`
      WITH revived AS (
        UPDATE webhook_deliveries
        SET state = 'pending', dead_reason = NULL, finished_at = NULL,
            epoch = CASE WHEN sequence IS NULL THEN ${currentEpoch(sql)} ELSE epoch END
        WHERE subscription_id = ${id}::uuid AND state = 'dead'
          AND (dead_reason LIKE 'disabled:%' OR dead_reason = 'stale')
          AND event_seq BETWEEN ${from} AND ${to}
        RETURNING id
      ), created AS (
        INSERT INTO webhook_deliveries (subscription_id, event_seq, epoch, event_at)
        SELECT s.id, e.seq, ${currentEpoch(sql)}, e.occurred_at
        FROM webhook_subscriptions AS s
        JOIN event_log AS e ON e.seq BETWEEN ${from} AND ${to}
          AND ${takesSql(sql, "s", "e.type", "e.payload")}
        WHERE s.id = ${id}::uuid
          AND EXISTS (SELECT 1 FROM webhook_subscription_spaces AS ss
                      WHERE ss.subscription_id = s.id AND ss.space_id = e.space_id)
        ON CONFLICT (subscription_id, event_seq) DO NOTHING
        RETURNING id
      )
      SELECT (SELECT count(*) FROM revived)::int AS revived, (SELECT count(*) FROM created)::int AS created`
    const deliveries = (row?.revived ?? 0) + (row?.created ?? 0)
    if (deliveries > 0) yield* ensureDrainer(sql, id)
    return deliveries
  })

/** A drain job for `id`, unless a live one holds its slot (which is then nudged), as a round does. */
export const ensureDrainer = (sql: SqlClient.SqlClient, id: string) =>
  sql`
    WITH counted AS (
      SELECT ${id}::uuid AS sub, NULL::bigint AS first
    ), ${lockedCte(sql)}, ${heldCtes(sql)}, ${Jobs.insertCtes(
      sql,
      sql`(
        SELECT ${deliverKind}::text AS kind, ${queue}::text AS queue, jsonb_build_object('subscription', sub::text) AS args,
               NULL::int2 AS priority, ${maxAttempts}::int AS max_attempts, NULL::timestamptz AS scheduled_at,
               NULL::text AS unique_key, NULL::text AS trace_parent
        FROM held WHERE NOT is_held
      )`,
    )}
    SELECT ${Jobs.insertCounts(sql)}, (SELECT count(*) FROM nudged)::int AS nudged`

/**
 * Enables the subscription `id` from the head (`fromSeq` absent) or from `fromSeq`, in one
 * transaction. An active subscription is left as it is.
 */
export const resume = (id: string, fromSeq: bigint | undefined) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    return yield* sql.withTransaction(
      Effect.gen(function* () {
        // The cursor first, as a round takes it before the subscription rows.
        const cursor = yield* ConsumerCursors.lock(consumer)
        const state = yield* lockState(sql, id)
        if (state === undefined) return { _tag: "NotFound" } satisfies Resumed
        if (state === "active") return { _tag: "AlreadyActive" } satisfies Resumed
        const { head, oldest } = yield* bounds(sql)
        if (fromSeq === undefined) {
          yield* activate(sql, id, head)
          return { _tag: "Enabled", after: head, deliveries: 0 } satisfies Resumed
        }
        if (oldest === null || fromSeq < oldest || fromSeq > head) {
          return yield* new SeqNotInLog({ subscription: id, seq: fromSeq, oldestKept: oldest, head })
        }
        const after = fromSeq - 1n
        yield* activate(sql, id, after)
        const read = cursor ?? head
        const deliveries = read >= fromSeq ? yield* catchUp(sql, id, fromSeq, read) : 0
        return { _tag: "Enabled", after, deliveries } satisfies Resumed
      }),
    )
  }).pipe(Effect.withSpan("SubscriptionResume.resume", { attributes: { "webhook.subscription": id } }))
