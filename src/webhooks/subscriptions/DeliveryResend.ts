/**
 * Sending deliveries again: one delivery (`resend`, delivered or dead), or every failed delivery of
 * a subscription since a time (`recover`, in batches, run by the `webhook.recover` job on the
 * `webhooks` queue, so a long history never becomes one request or one long transaction).
 *
 * What it keeps true: a delivery sent again is the same message to the receiver. It goes pending
 * with the number (and so the `webhook-id`) it had; one that never had a number takes the next one
 * when it goes out, in the current epoch. The subscription's drainer sends it in seq order with
 * whatever else is pending, so nothing after it in the queue overtakes it.
 *
 * "Failed" here is what ended dead without a 2xx because the subscription was disabled or
 * re-enabled past it (`disabled:<cause>`, `stale`): deliveries suppressed for a right or the scope
 * stay as they are (sending them would change nothing: the right is checked again at send time).
 * A recovery also runs the subscription's drain job at once if it is waiting out a retry delay,
 * which is what sends the failing delivery at the head of its queue now.
 *
 * Each batch runs under the `webhooks` cursor's lock, as a re-enabling does, and only for
 * deliveries whose event is still in the log (one that left it would disable the subscription
 * with `gap` when its turn came). A delivery at or before the subscription's start (it was
 * re-enabled from the head since) moves the start back to it, which the drainer needs to send it;
 * that is refused while the `webhooks` consumer has not read up to the start yet, since the
 * rounds would then deliver the events the re-enabling skipped.
 */
import { Effect, Schema } from "effect"
import { SqlClient, type Statement } from "effect/sql"
import * as ConsumerCursors from "../../consumer/ConsumerCursors.ts"
import * as JobControl from "../../jobs/JobControl.ts"
import * as JobKind from "../../jobs/JobKind.ts"
import * as Jobs from "../../jobs/Jobs.ts"
import { headSeq, holdsEvent } from "../../log/EventLog.ts"
import { Uuid } from "../../platform/Uuid.ts"
import { maxAttempts, queue } from "../drain/DrainJob.ts"
import { currentEpoch } from "../WebhookEpoch.ts"
import * as WebhookFanOut from "../WebhookFanOut.ts"
import { ensureDrainer } from "./SubscriptionResume.ts"

/** The consumer whose cursor a re-send falls between rounds of (`WebhookFanOut.name`). */
const consumer = WebhookFanOut.name

/** Deliveries one statement of a recovery makes pending again. */
export const batchSize = 1000

export const recoverKind = "webhook.recover"

/** The recovery job's arguments: the subscription, and the creation time from which its failed deliveries go again. */
export const RecoverArgs = Schema.Struct({ subscription: Uuid, since: Schema.String })

const reasons = {
  SubscriptionDisabled: "cannot be sent again: the subscription is disabled (enable it first)",
  AlreadyPending: "is pending already: its drainer sends it",
  EventLeftLog: "cannot be sent again: its event left the log (retention)",
  ConsumerBehind:
    "cannot be sent again yet: the webhooks consumer has not read up to the subscription's start; try again shortly",
} as const

export class ResendRefused extends Schema.TaggedError<ResendRefused>()("ResendRefused", {
  subscription: Schema.String,
  /** A delivery id, when one was asked for. */
  delivery: Schema.optional(Schema.String),
  reason: Schema.Literals(Object.keys(reasons) as Array<keyof typeof reasons>),
}) {
  override get message() {
    const what = this.delivery === undefined ? `subscription ${this.subscription}` : `delivery ${this.delivery}`
    return `${what} ${reasons[this.reason]}`
  }
}

/**
 * The `webhooks` cursor's lock, until the caller commits: what a re-send takes before any
 * subscription row, as a round does. Its `last_seq`.
 *
 * @internal
 */
export const lockCursor = ConsumerCursors.lock(consumer)

/**
 * The subscription's state and start, its row locked until the caller commits; `cursor` is what
 * `lockCursor`, taken before, gave.
 *
 * @internal
 */
export const lockSubscriptionAfter = (sql: SqlClient.SqlClient, id: string, cursor: bigint | undefined) =>
  Effect.gen(function* () {
    const [row] = yield* sql<{ state: "active" | "disabled"; startedSeq: bigint; head: bigint }>`
      SELECT s.state, s.started_seq AS "startedSeq", ${headSeq(sql)} AS head
      FROM webhook_subscriptions AS s WHERE s.id = ${id}::uuid FOR UPDATE`
    return row === undefined ? undefined : { ...row, read: cursor ?? row.head }
  })

/** `lockCursor`, then `lockSubscriptionAfter`. */
const lockSubscription = (sql: SqlClient.SqlClient, id: string) =>
  Effect.flatMap(lockCursor, (cursor) => lockSubscriptionAfter(sql, id, cursor))

/**
 * Makes the deliveries `picked` selects (ids of deliveries of `id`, locked) pending again, moves
 * the subscription's start back before the first of them if need be, and makes sure a drainer
 * will send them. Inside the caller's transaction, after `lockSubscription`.
 *
 * @internal
 */
export const revive = (
  sql: SqlClient.SqlClient,
  id: string,
  subscription: { readonly startedSeq: bigint; readonly read: bigint },
  picked: Statement.Fragment,
) =>
  Effect.gen(function* () {
    const [row] = yield* sql<{ n: number; first: bigint | null }>`
      WITH revived AS (
        UPDATE webhook_deliveries AS d
        SET state = 'pending', dead_reason = NULL, finished_at = NULL,
            epoch = CASE WHEN d.sequence IS NULL THEN ${currentEpoch(sql)} ELSE d.epoch END
        FROM (${picked}) AS p WHERE d.id = p.id
        RETURNING d.event_seq
      )
      SELECT count(*)::int AS n, min(event_seq) AS first FROM revived`
    const n = row?.n ?? 0
    const first = row?.first ?? null
    if (first !== null && first <= subscription.startedSeq) {
      if (subscription.startedSeq > subscription.read) {
        return yield* new ResendRefused({ subscription: id, reason: "ConsumerBehind" })
      }
      yield* sql`UPDATE webhook_subscriptions SET started_seq = ${first - 1n} WHERE id = ${id}::uuid`
    }
    if (n > 0) yield* ensureDrainer(sql, id)
    return n
  })

/** Deliveries of `id` whose event is still in the log, matching `where`, locked, in id order. */
const pick = (sql: SqlClient.SqlClient, id: string, where: Statement.Fragment, limit: number) => sql`
  SELECT d.id FROM webhook_deliveries AS d
  WHERE d.subscription_id = ${id}::uuid AND ${where}
    AND ${holdsEvent(sql, sql`d.event_seq`, sql`d.event_at`)}
  ORDER BY d.id LIMIT ${limit} FOR UPDATE OF d`

/** Sends one delivery again (delivered or dead); the subscription must be active. */
export const resend = Effect.fn("DeliveryResend.resend")(function* (deliveryId: bigint) {
  const sql = yield* SqlClient.SqlClient
  return yield* sql.withTransaction(
    Effect.gen(function* () {
      const [d] = yield* sql<{ subscriptionId: string; state: string; present: boolean }>`
        SELECT d.subscription_id::text AS "subscriptionId", d.state,
               ${holdsEvent(sql, sql`d.event_seq`, sql`d.event_at`)} AS present
        FROM webhook_deliveries AS d WHERE d.id = ${deliveryId}`
      if (d === undefined) return false
      const refuse = (reason: ResendRefused["reason"]) =>
        new ResendRefused({ subscription: d.subscriptionId, delivery: String(deliveryId), reason })
      const subscription = yield* lockSubscription(sql, d.subscriptionId)
      if (subscription === undefined) return false
      if (subscription.state !== "active") return yield* refuse("SubscriptionDisabled")
      if (d.state === "pending") return yield* refuse("AlreadyPending")
      if (!d.present) return yield* refuse("EventLeftLog")
      const n = yield* revive(
        sql,
        d.subscriptionId,
        subscription,
        pick(sql, d.subscriptionId, sql`d.id = ${deliveryId} AND d.state <> 'pending'`, 1),
      )
      return n > 0
    }),
  )
})

const failed = (sql: SqlClient.SqlClient, since: Date) => sql`
  d.state = 'dead' AND (d.dead_reason LIKE 'disabled:%' OR d.dead_reason = 'stale') AND d.created_at >= ${since}`

/** Whether the subscription can be recovered now: it exists (`false` if not) and is active. */
export const checkRecoverable = Effect.fn("DeliveryResend.checkRecoverable")(function* (subscriptionId: string) {
  const sql = yield* SqlClient.SqlClient
  const [row] = yield* sql<{
    state: string
  }>`SELECT state FROM webhook_subscriptions WHERE id = ${subscriptionId}::uuid`
  if (row === undefined) return false
  if (row.state !== "active") {
    return yield* new ResendRefused({ subscription: subscriptionId, reason: "SubscriptionDisabled" })
  }
  return true
})

/**
 * Makes every failed delivery of the subscription created since `since` pending again, a batch
 * per transaction, then runs its drain job now if it waits out a retry delay. How many went
 * pending; `undefined` when the subscription does not exist.
 */
export const recover = Effect.fn("DeliveryResend.recover")(function* (subscriptionId: string, since: Date) {
  const sql = yield* SqlClient.SqlClient
  let total = 0
  for (;;) {
    const n = yield* sql.withTransaction(
      Effect.gen(function* () {
        const subscription = yield* lockSubscription(sql, subscriptionId)
        if (subscription === undefined) return undefined
        if (subscription.state !== "active") {
          return yield* new ResendRefused({ subscription: subscriptionId, reason: "SubscriptionDisabled" })
        }
        return yield* revive(
          sql,
          subscriptionId,
          subscription,
          pick(sql, subscriptionId, failed(sql, since), batchSize),
        )
      }),
    )
    if (n === undefined) return undefined
    total += n
    if (n < batchSize) break
  }
  yield* runWaitingDrainer(sql, subscriptionId)
  return total
})

/**
 * Runs the subscription's drain job now if it waits out a retry delay, which is what sends the
 * failing delivery at the head of its queue at once. After the commit that revived deliveries.
 */
export const runWaitingDrainer = (sql: SqlClient.SqlClient, subscriptionId: string) =>
  Effect.gen(function* () {
    const [slot] = yield* sql<{ job: bigint | null }>`
      SELECT w.job_id AS job FROM webhook_drains AS w
      WHERE w.subscription_id = ${subscriptionId}::uuid AND ${Jobs.isWaiting(sql, sql`w.job_id`)}`
    if (slot?.job != null) yield* Effect.ignore(JobControl.retry(slot.job))
  })

/**
 * Inserts the recovery job for the subscription (which must exist and be active); its id. A
 * subscription that does not exist is `undefined`.
 */
export const requestRecovery = Effect.fn("DeliveryResend.requestRecovery")(function* (
  subscriptionId: string,
  since: Date,
) {
  const sql = yield* SqlClient.SqlClient
  if (!(yield* checkRecoverable(subscriptionId))) return undefined
  const args = JSON.stringify({ subscription: subscriptionId, since: since.toISOString() })
  const [row] = yield* sql<{ id: bigint }>`
    WITH ${Jobs.insertCtes(
      sql,
      sql`(
        SELECT ${recoverKind}::text AS kind, ${queue}::text AS queue, ${args}::jsonb AS args, NULL::int2 AS priority,
               ${maxAttempts}::int AS max_attempts, NULL::timestamptz AS scheduled_at, NULL::text AS unique_key,
               NULL::text AS trace_parent
      )`,
    )}
    SELECT (SELECT id FROM jobs_inserted) AS id, ${Jobs.insertCounts(sql)}`
  return row!.id
})

/**
 * The `webhook.recover` job kind, for the worker's `webhooks` queue. A subscription removed or
 * disabled since the request cancels it (retrying would not help).
 */
export const make = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  return JobKind.make({
    kind: recoverKind,
    args: RecoverArgs,
    run: ({ subscription, since }) =>
      recover(subscription, new Date(since)).pipe(
        Effect.provideService(SqlClient.SqlClient, sql),
        Effect.catchTag("ResendRefused", (e) => Effect.fail(new JobKind.JobCancel({ reason: e.message }))),
        Effect.flatMap((n) =>
          n === undefined
            ? Effect.fail(new JobKind.JobCancel({ reason: `subscription ${subscription} no longer exists` }))
            : Effect.logInfo(
                `webhooks: subscription ${subscription}: ${n} failed deliveries since ${since} sent again`,
              ),
        ),
      ),
  })
})
