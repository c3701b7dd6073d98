/**
 * State changes of webhook subscriptions that several parts share (the `WebhookSubscriptions`
 * service, the `webhooks` consumer's loss handler, the delivery job). Disabling a subscription ends its pending
 * deliveries and frees its drain slot in the same statement: a disabled subscription has nothing in
 * flight, its drainer (perhaps snoozed for hours after a failure) stops at its next step, and
 * enabling it again (`SubscriptionResume`) starts from the head of the log or from a seq still in
 * it, with a fresh drainer.
 *
 * A disable appends its `bothy.subscription.disabled` event (`OperationalEvents`) in the same
 * transaction as the state change, the append last: a rollback leaves neither. Inside a caller's
 * transaction (the round's loss handler) the append joins it.
 */
import { Effect, Metric } from "effect"
import { SqlClient } from "effect/sql"
import * as WebhookMetrics from "../WebhookMetrics.ts"
import * as OperationalEvents from "./OperationalEvents.ts"
import * as SubscriptionHealth from "./SubscriptionHealth.ts"

export type DisabledCause = (typeof WebhookMetrics.disabledCauses)[number]

const disabledCount = (cause: DisabledCause, n: number) =>
  n > 0 ? Metric.update(Metric.withAttributes(WebhookMetrics.disabled, { cause }), n) : Effect.void

/** One line per change, naming at most 10 of the subscriptions (a gap may disable thousands at once). */
const logDisabled = (ids: ReadonlyArray<string>, cause: DisabledCause) => {
  const named = ids.slice(0, 10).join(", ")
  const more = ids.length > 10 ? ` and ${ids.length - 10} more` : ""
  const line = `webhooks: ${ids.length === 1 ? "subscription" : `${ids.length} subscriptions`} ${named}${more} disabled with cause ${cause}`
  return cause === "manual" ? Effect.logInfo(line) : Effect.logWarning(line)
}

/** The last request's answer, when one caused the disable. */
export interface LastAnswer {
  readonly status: number | null
  readonly errorClass: string | null
}

/**
 * Disables the active subscriptions among `ids` and appends one `bothy.subscription.disabled`
 * event for each, in one transaction; returns those it disabled.
 */
export const disable = Effect.fn("SubscriptionStates.disable")(function* (
  ids: ReadonlyArray<string>,
  cause: DisabledCause,
  last?: LastAnswer,
) {
  const sql = yield* SqlClient.SqlClient
  const stopped = yield* sql.withTransaction(
    Effect.gen(function* () {
      const rows = yield* stopRows(ids, cause)
      yield* OperationalEvents.append(
        rows.map((row) =>
          OperationalEvents.disabledEvent({
            subscription: row.id,
            owner: row.owner,
            cause,
            deliveriesEnded: row.ended,
            failingSince: row.failingSince?.toISOString() ?? null,
            lastStatus: last?.status ?? null,
            lastError: last?.errorClass ?? null,
          }),
        ),
      )
      return rows
    }),
  )
  const disabled = stopped.map((r) => r.id)
  yield* disabledCount(cause, disabled.length)
  if (disabled.length > 0) yield* logDisabled(disabled, cause)
  return disabled
})

/**
 * What `disable` does in the database, without its metric and log line: for a subscription about
 * to be deleted, which is deleted (and logged so), not disabled.
 */
export const stop = Effect.fn("SubscriptionStates.stop")(function* (ids: ReadonlyArray<string>, cause: DisabledCause) {
  return (yield* stopRows(ids, cause)).map((r) => r.id)
})

/**
 * `stop`'s statement: the subscriptions it disabled, with their owner, the deliveries it ended and
 * when their failing began (what `bothy.subscription.disabled` reports). A disabled subscription is
 * no longer degraded: its health starts afresh when it is enabled again.
 */
const stopRows = (ids: ReadonlyArray<string>, cause: DisabledCause) =>
  Effect.gen(function* () {
    if (ids.length === 0) return []
    const sql = yield* SqlClient.SqlClient
    return yield* sql<{ id: string; owner: string; ended: number; failingSince: Date | null }>`
      WITH off AS (
        UPDATE webhook_subscriptions
        SET state = 'disabled', disabled_cause = ${cause}, disabled_at = clock_timestamp(),
            ${sql.literal(SubscriptionHealth.cleared)}
        WHERE id IN ${sql.in(ids)} AND state = 'active'
        RETURNING id, owner, failing_first_at
      ), ended AS (
        UPDATE webhook_deliveries AS d SET state = 'dead', dead_reason = ${`disabled:${cause}`}, finished_at = clock_timestamp()
        FROM off WHERE d.subscription_id = off.id AND d.state = 'pending'
        RETURNING d.subscription_id
      ), freed AS (
        UPDATE webhook_drains AS w SET job_id = NULL FROM off WHERE w.subscription_id = off.id AND w.job_id IS NOT NULL
        RETURNING w.subscription_id
      )
      SELECT off.id::text, off.owner, off.failing_first_at AS "failingSince",
             (SELECT count(*) FROM ended WHERE ended.subscription_id = off.id)::int AS ended
      FROM off ORDER BY off.id`
  })

/**
 * The loss handler's rule: every active subscription that began before the end of a lost range
 * may have missed events of it, and is disabled with cause `gap`.
 */
export const disableStartedBefore = Effect.fn("SubscriptionStates.disableStartedBefore")(function* (
  lastLostSeq: bigint,
) {
  const sql = yield* SqlClient.SqlClient
  const rows = yield* sql<{ id: string }>`
    SELECT id::text FROM webhook_subscriptions WHERE state = 'active' AND started_seq < ${lastLostSeq}`
  return yield* disable(
    rows.map((r) => r.id),
    "gap",
  )
})
