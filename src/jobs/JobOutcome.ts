/**
 * What an attempt's exit means for its job, as a pure function of the exit, the job's attempt
 * counts, the worker's clock reading and the kind's retry delay (no effect, no clock of its own), so
 * that every rule of `JobKind`'s header is tested without a database:
 *
 *   success            -> Completed
 *   JobCancel          -> Cancelled, with the reason
 *   JobSnooze          -> Snooze at now + delay (no attempt spent)
 *   timeout            -> Retry (or Discarded on the last attempt), kind "timeout"
 *   any other failure  -> Retry / Discarded, kind "failure", the error's message
 *   defect             -> Retry / Discarded, kind "defect", the pretty cause
 *
 * Args that do not decode and attempts that shutdown interrupts never reach an exit of the kind's
 * run; `JobExecutor` makes their outcomes with `errorOf` directly.
 */
import { Cause, Duration, Exit, Option } from "effect"
import type { AttemptError, Outcome } from "./JobFinalize.ts"
import { JobCancel, JobSnooze } from "./JobKind.ts"

/** What the classification needs to know of the job. */
export interface Attempt {
  readonly attempt: number
  readonly maxAttempts: number
  /**
   * Attempts that failed before this one (default `attempt - 1`). Snoozes and releases raise
   * `attempt` without spending one, so a job that snoozed often has a high `attempt` and few
   * failures: its retry delay counts the failures.
   */
  readonly failedBefore?: number
}

/**
 * Delay before the next attempt after the `failures`-th failed one (the kind's `retryDelay`, or the
 * worker's default); attempts a snooze or a release gave back do not count.
 */
export type RetryDelay = (failures: number) => Duration.Duration

export const timeoutMessage = "the attempt exceeded its timeout"

export const errorOf = (job: Attempt, kind: AttemptError["kind"], message: string, now: number): AttemptError => ({
  attempt: job.attempt,
  at: new Date(now).toISOString(),
  kind,
  message,
})

/** A failed attempt: retried after the kind's delay, or discarded when it was the last. */
export const retryOrDiscard = (job: Attempt, error: AttemptError, now: number, retryDelay: RetryDelay): Outcome =>
  job.attempt >= job.maxAttempts
    ? { _tag: "Discarded", error }
    : {
        _tag: "Retry",
        at: new Date(now + Duration.toMillis(retryDelay((job.failedBefore ?? job.attempt - 1) + 1))),
        error,
      }

/** The outcome of an attempt that ended with `exit` at `now` (the worker's clock, in milliseconds). */
export const outcomeOf = (
  job: Attempt,
  exit: Exit.Exit<void, unknown>,
  now: number,
  retryDelay: RetryDelay,
): Outcome => {
  if (Exit.isSuccess(exit)) return { _tag: "Completed" }
  const failure = Cause.findErrorOption(exit.cause)
  if (Option.isNone(failure)) {
    return retryOrDiscard(job, errorOf(job, "defect", Cause.pretty(exit.cause), now), now, retryDelay)
  }
  const e = failure.value
  if (e instanceof JobCancel) return { _tag: "Cancelled", error: errorOf(job, "cancelled", e.reason, now) }
  if (e instanceof JobSnooze) return { _tag: "Snooze", at: new Date(now + Duration.toMillis(e.delay)) }
  if (Cause.isTimeoutError(e)) return retryOrDiscard(job, errorOf(job, "timeout", timeoutMessage, now), now, retryDelay)
  const message = e instanceof Error ? e.message : String(e)
  return retryOrDiscard(job, errorOf(job, "failure", message, now), now, retryDelay)
}
