/**
 * When a failed webhook delivery is tried again, and when a failing endpoint is given up on.
 *
 * Retries after failures: 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h, then every 10 h for as long as
 * the subscription is active (the oldest pending delivery is never skipped: order matters more than
 * progress), each ±20 % jitter. A 429 or a timeout waits at least 60 s; a `Retry-After` is honoured
 * but clamped to [step, 2 × step], so a receiver can slow us down, not stall or rush us.
 *
 * Disabling: a subscription whose every attempt failed for 5 days is disabled (`failing`). The
 * clock runs from the first failure of the streak but counts only once a second failure came at
 * least 12 h after it (one failure followed by days of silence is not "failing for 5 days"); any
 * success resets it. The disable window plus the longest step must stay below
 * `sync.event_retention`, or a failing endpoint's events would leave the log first and turn into
 * a gap; the start check enforces that.
 */
import { Duration } from "effect"
import * as RetryAfter from "../../outbound/RetryAfter.ts"

export const steps: ReadonlyArray<Duration.Duration> = [
  Duration.seconds(5),
  Duration.minutes(5),
  Duration.minutes(30),
  Duration.hours(2),
  Duration.hours(5),
  Duration.hours(10),
  Duration.hours(10),
]
export const longestStep = Duration.hours(10)
export const disableWindow = Duration.days(5)
export const confirmAfter = Duration.hours(12)
const jitter = 0.2
const slowDownFloor = Duration.seconds(60)

export interface Failure {
  /** 1-based number of the attempt that just failed. */
  readonly attempt: number
  readonly status: number | undefined
  readonly errorClass: string | undefined
  /** The raw `Retry-After` header, seconds or an HTTP date. */
  readonly retryAfter: string | undefined
  readonly now: number
}

/**
 * The delay before the next attempt. `random` in [0, 1) drives the jitter; `schedule` replaces the
 * steps (tests use short ones), the last step repeating.
 */
export const nextDelay = (
  failure: Failure,
  random: () => number = Math.random,
  schedule: ReadonlyArray<Duration.Duration> = steps,
): Duration.Duration => {
  const step = Duration.toMillis(schedule[failure.attempt - 1] ?? schedule.at(-1) ?? longestStep)
  const requested = RetryAfter.millis(failure.retryAfter, failure.now)
  let delay =
    requested === undefined ? step * (1 + jitter * (2 * random() - 1)) : Math.min(Math.max(requested, step), 2 * step)
  if (failure.status === 429 || failure.errorClass === "timeout") {
    delay = Math.max(delay, Duration.toMillis(slowDownFloor))
  }
  return Duration.millis(Math.round(delay))
}

export interface FailingClock {
  /** First failure of the current streak. */
  readonly firstAt: number | null
  /** Set (to `firstAt`) once a failure came at least 12 h after the first: the clock counts. */
  readonly clockAt: number | null
}

/** The clock of a subscription whose last attempt succeeded (or that never failed). */
export const noFailures: FailingClock = { firstAt: null, clockAt: null }

/** The clock after another failure at `now`, and whether the subscription must be disabled. */
export const afterFailure = (clock: FailingClock, now: number): FailingClock & { readonly disable: boolean } => {
  const firstAt = clock.firstAt ?? now
  const clockAt = clock.clockAt ?? (now - firstAt >= Duration.toMillis(confirmAfter) ? firstAt : null)
  return { firstAt, clockAt, disable: clockAt !== null && now - clockAt >= Duration.toMillis(disableWindow) }
}

/** The whole time a failing endpoint is retried before it is disabled, at most. */
export const longestFailingSpan = Duration.sum(disableWindow, longestStep)
