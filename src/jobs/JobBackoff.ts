/**
 * Retry delays: exponential with a cap and jitter, so a burst of failures does not come back as
 * a burst of retries at the same instant.
 */
import { Duration } from "effect"

export interface ExponentialOptions {
  readonly base: Duration.Input
  readonly factor: number
  readonly cap: Duration.Input
  /** Fraction of the delay added or removed at random, e.g. 0.1 for ±10 %. */
  readonly jitter: number
}

export const defaults: ExponentialOptions = { base: "1 second", factor: 2, cap: "1 hour", jitter: 0.1 }

/** Delay before the next attempt after `attempt` (1-based) failed: base·factor^(attempt-1), capped, jittered. */
export const exponential =
  (options: ExponentialOptions = defaults, random: () => number = Math.random) =>
  (attempt: number): Duration.Duration => {
    const raw = Duration.toMillis(options.base) * options.factor ** Math.max(0, attempt - 1)
    const capped = Math.min(raw, Duration.toMillis(options.cap))
    return Duration.millis(capped * (1 + options.jitter * (2 * random() - 1)))
  }
