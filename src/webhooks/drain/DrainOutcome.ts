/**
 * What a drainer does with a delivery that does not go out (`settle`) and with a request that
 * failed (`failed`): each ends on record in one statement before the run goes on, and none of
 * them lets a delivery block the queue behind it for good. A failure keeps the slot through its
 * retry delay, so nothing after the failed delivery is sent meanwhile.
 */
import { Duration, Effect, Metric } from "effect"
import { disable } from "../subscriptions/SubscriptionStates.ts"
import * as WebhookMetrics from "../WebhookMetrics.ts"
import { type Drain, withSql } from "./Drain.ts"
import { giveBackNumbers } from "./DrainRun.ts"
import type { Run } from "./DrainRunState.ts"
import {
  attemptsBy,
  endLeftovers,
  judgeHealth,
  type PendingDelivery,
  recordAttempts,
  type Sent,
  suppress,
} from "./PendingDeliveries.ts"
import * as WebhookSchedule from "./WebhookSchedule.ts"

/**
 * Settles a delivery that is not to be sent: leftovers of a disabled or re-enabled subscription
 * end dead, the event gone from the log disables the subscription (`gap`), one whose space left
 * the scope is suppressed.
 */
export const settle = (drain: Drain, run: Run, d: PendingDelivery) =>
  Effect.gen(function* () {
    const subscriptionId = run.subscriptionId
    if (d.state !== "active" || d.eventSeq <= d.startedSeq) {
      yield* giveBackNumbers(drain, run)
      yield* endLeftovers(drain.sql, subscriptionId, d)
      return yield* drain.onRecorded(subscriptionId)
    }
    if (!d.present) {
      yield* giveBackNumbers(drain, run)
      yield* withSql(drain, disable([subscriptionId], "gap"))
      yield* drain.onRecorded(subscriptionId)
      return yield* Effect.logError(
        `webhooks: the event of subscription ${subscriptionId}'s next delivery left the log; disabled with cause gap`,
      )
    }
    yield* suppress(drain, subscriptionId, d, "scope")
  })

/** How logs name a subscription's endpoint: by origin only, since a URL's path may hold a secret. */
export const targetOf = (subscriptionId: string, url: string) =>
  `webhooks: subscription ${subscriptionId} (${URL.parse(url)?.origin ?? "bad URL"})`

/** What a failed request got back, for a log line: the status, or the class of error. */
const answerOf = ({ result }: Sent) =>
  result.status !== undefined ? `answered ${result.status}` : `failed (${result.errorClass ?? "error"})`

/**
 * Refusals, redirects and token failures are the target's configuration: the operator hears of
 * them, once a minute per subscription. Only the origin is named: a URL's path may hold a secret.
 */
const warnAbout = (drain: Drain, subscriptionId: string, { delivery, result }: Sent) => {
  const target = targetOf(subscriptionId, delivery.url)
  return result.errorClass === "blocked_ip"
    ? drain.warn(
        subscriptionId,
        `${target}: target refused (${result.refusal ?? "blocked"}); its deliveries wait for retries`,
      )
    : result.errorClass === "redirect"
      ? drain.warn(
          subscriptionId,
          `${target}: the endpoint answered ${result.status}, and redirects are not followed; its deliveries wait for retries`,
        )
      : result.errorClass === "auth_token"
        ? // The body is `OAuthTokenFailed`'s message: token URL, reason, the server's error; never the secret.
          drain.warn(
            subscriptionId,
            `${target}: no OAuth2 token, so nothing was sent: ${result.body}; its deliveries wait for retries`,
          )
        : Effect.void
}

const lastAnswer = ({ result }: Sent) => ({ status: result.status ?? null, errorClass: result.errorClass ?? null })

/** What follows a failed request: `settled`, the run goes on; `snooze`, retry after `delay` keeping the slot. */
export type Failed = { readonly _tag: "settled" } | { readonly _tag: "snooze"; readonly delay: Duration.Duration }

const settled: Failed = { _tag: "settled" }

/**
 * A failed request (the last of `batch`), on record with the 2xx answers before it. `settled`:
 * the delivery is no longer pending or the subscription got disabled; `snooze`: retry after the
 * delay, keeping the slot.
 */
export const failed = (
  drain: Drain,
  subscriptionId: string,
  batch: ReadonlyArray<Sent>,
  clockBefore: WebhookSchedule.FailingClock,
) =>
  Effect.gen(function* () {
    const sent = batch.at(-1)!
    const { delivery: d, result } = sent
    yield* Metric.update(WebhookMetrics.failingHeadAge, Math.max(0, (sent.answered - d.occurredAt!.getTime()) / 1000))
    yield* warnAbout(drain, subscriptionId, sent)
    if (result.status === 410) {
      const states = yield* recordAttempts(drain, subscriptionId, batch, clockBefore)
      if (states.at(-1) === "pending") {
        yield* withSql(drain, disable([subscriptionId], "gone", lastAnswer(sent)))
        yield* attemptsBy("gone")
      }
      return settled
    }
    const clock = WebhookSchedule.afterFailure(clockBefore, sent.answered)
    const states = yield* recordAttempts(drain, subscriptionId, batch, clock)
    if (states.at(-1) !== "pending") return settled
    yield* attemptsBy("failed")
    if (clock.disable) {
      yield* withSql(drain, disable([subscriptionId], "failing", lastAnswer(sent)))
      return settled
    }
    yield* judgeHealth(drain, subscriptionId, batch)
    const delay = WebhookSchedule.nextDelay(
      {
        attempt: d.attempts + 1,
        status: result.status,
        errorClass: result.errorClass,
        retryAfter: result.retryAfter,
        now: sent.answered,
      },
      Math.random,
      drain.config.retrySteps,
    )
    // One line when the subscription starts failing (its recovery is `recovered`'s), not one a retry.
    if (clockBefore.firstAt === null) {
      yield* Effect.logWarning(
        `${targetOf(subscriptionId, d.url)}: started failing, ${answerOf(sent)}; its deliveries wait, next try in ${Duration.format(delay)}`,
      )
    }
    return { _tag: "snooze", delay } satisfies Failed as Failed
  })

/** The first 2xx of a subscription that was failing: one line, with how long it failed. */
export const recovered = (subscriptionId: string, sent: Sent) => {
  const since = sent.delivery.failingFirstAt
  return since === null
    ? Effect.void
    : Effect.logWarning(
        `${targetOf(subscriptionId, sent.delivery.url)}: recovered, delivered again after failing since ${since.toISOString()} (${Duration.format(Duration.millis(Math.max(0, sent.answered - since.getTime())))})`,
      )
}
