/**
 * When a push delivery that failed (a 5xx, a network error) is tried again: after 10 s, 60 s,
 * 5 min, then every 5 min, until the message's TTL has passed (then it is dead: the push service
 * would drop it anyway). The attempts a job gets cover the longest TTL, so the TTL, not the
 * attempt count, is what ends the retries.
 */
import { Duration } from "effect"

export const steps: ReadonlyArray<Duration.Duration> = [Duration.seconds(10), Duration.seconds(60), Duration.minutes(5)]

/** Delay before attempt `attempt + 1` after attempt `attempt` failed. */
export const retryDelay = (attempt: number): Duration.Duration =>
  steps[Math.min(attempt, steps.length) - 1] ?? steps[0]!

/** Attempts enough to keep retrying for `ttl` (every step taken, then the last one repeated), and one more. */
export const maxAttempts = (ttl: Duration.Duration): number => {
  const last = steps[steps.length - 1]!
  const afterSteps = Math.max(0, Duration.toMillis(ttl) - steps.reduce((sum, d) => sum + Duration.toMillis(d), 0))
  return steps.length + Math.ceil(afterSteps / Duration.toMillis(last)) + 1
}
