/**
 * A subscription's rate limit (`SubscriptionOptions`, `webhook_subscriptions.rate_limit`): its
 * drainer starts each request at least 1 / rate_limit seconds after the one before, retries and
 * re-sends included. So no half-open span of n / rate_limit seconds holds more than n requests:
 * for a whole-number limit, no second holds more than rate_limit.
 *
 * Why it holds across runs and processes: one run sends for a subscription at a time. Its
 * deliveries are read only by the job holding its drain slot (`DrainSlot`; the read requires
 * `webhook_drains.job_id` to be the run's job), and the job runtime runs a job in one place at a
 * time (claimed under a worker's lease, put back only once that lease has expired). A run knows
 * when it sent last; a run that has not sent yet reads it from the record (`lastRequestAt`): every
 * attempt sets its delivery's `last_attempt_at`, and a run puts every answer on record before it
 * lets the slot go or ends (a crash aside, after which the job waits a lease before it runs again).
 *
 * Time is the `Clock`'s, as the recorded attempt times are, so tests drive it with `TestClock`;
 * workers whose clocks disagree can shorten the one gap at a handover between them by the skew.
 * The limit is read with each batch of deliveries, so an update applies from the drainer's next
 * read without a restart. A wait up to `sleepAtMost` is slept in the run; a longer one puts the
 * answers on record and snoozes the job for it, keeping the slot, so a slow limit holds no worker
 * slot.
 */
import { Clock, Duration, Effect } from "effect"
import type { SqlClient } from "effect/sql"
import * as JobKind from "../../jobs/JobKind.ts"
import type { Drain } from "./Drain.ts"
import { flush } from "./DrainRun.ts"
import type { Run } from "./DrainRunState.ts"
import * as RunState from "./DrainRunState.ts"

/** Waits longer than this snooze the job instead (keeping the slot). */
export const sleepAtMost = Duration.seconds(1)

/** The least time between two requests' starts under `rateLimit` requests per second. */
export const intervalMillis = (rateLimit: number) => 1000 / rateLimit

/**
 * When the subscription's last request started, from the record; `undefined` when none did.
 * Requests go out in seq order and the next waits for the one before to succeed, so the last one
 * is on the pending head or on the last attempted delivery below it; a delivery sent again after
 * later ones (a resend) makes the head older than them, and the delivery at `last_delivered_seq`
 * covers that.
 */
export const lastRequestAt = (sql: SqlClient.SqlClient, subscriptionId: string) =>
  sql<{ at: Date | null }>`
    SELECT greatest(
      (SELECT d.last_attempt_at FROM webhook_deliveries AS d
       WHERE d.subscription_id = ${subscriptionId}::uuid AND d.attempts > 0
         AND d.event_seq <= coalesce(
           (SELECT min(p.event_seq) FROM webhook_deliveries AS p
            WHERE p.subscription_id = ${subscriptionId}::uuid AND p.state = 'pending'),
           9223372036854775807)
       ORDER BY d.event_seq DESC LIMIT 1),
      (SELECT d.last_attempt_at FROM webhook_subscriptions AS s
       JOIN webhook_deliveries AS d ON d.subscription_id = s.id AND d.event_seq = s.last_delivered_seq
       WHERE s.id = ${subscriptionId}::uuid)
    ) AS at`.pipe(
    // The record keeps whole milliseconds of a start that may have had a fraction: one more, so the
    // rounding never shortens a gap.
    Effect.map(([row]) => (row?.at == null ? undefined : row.at.getTime() + 1)),
  )

/** Sleeps `wait`, telling `onPaced` once the sleep has begun (so a test moving the `TestClock` on it never moves it too early). */
const pause = (drain: Drain, subscriptionId: string, wait: Duration.Duration) => {
  const onPaced = drain.onPaced
  return onPaced === undefined
    ? Effect.sleep(wait)
    : Effect.all([Effect.sleep(wait), Effect.andThen(Effect.yieldNow, onPaced(subscriptionId, wait))], {
        concurrency: 2,
        discard: true,
      })
}

/**
 * Before the run's next request under `rateLimit`: returns when its turn has come, or fails with
 * a `JobSnooze` for the rest of a wait longer than `sleepAtMost` (after putting the answers so far
 * on record; the numbers of what was read go back, and it is read again when the job runs).
 */
export const waitTurn = (drain: Drain, run: Run, rateLimit: number) =>
  Effect.gen(function* () {
    if (!run.lastRequestKnown) RunState.lastRequestFound(run, yield* lastRequestAt(drain.sql, run.subscriptionId))
    const last = run.lastRequestAt
    if (last === undefined) return
    const wait = last + intervalMillis(rateLimit) - (yield* Clock.currentTimeMillis)
    if (wait <= 0) return
    if (wait > Duration.toMillis(sleepAtMost)) {
      yield* flush(drain, run)
      return yield* new JobKind.JobSnooze({ delay: Duration.millis(Math.ceil(wait)) })
    }
    yield* pause(drain, run.subscriptionId, Duration.millis(wait))
  })

/** After a request that started at `started`: the run's pace, for the next wait and for how far it reads ahead. */
export const sent = (run: Run, started: number, answered: number, rateLimit: number | null) =>
  RunState.paced(run, started, Math.max(answered - started, rateLimit === null ? 0 : intervalMillis(rateLimit)))
