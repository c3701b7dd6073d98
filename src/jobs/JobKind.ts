/**
 * A job kind: its name, the `Schema` its args must decode with, and the effect that runs it.
 *
 * What a run's outcome means:
 * - success: the job is completed (its row deleted, or kept a while if it has a unique key; see
 *   `JobFinalize`).
 * - `JobCancel`: it must never run again (e.g. "permission revoked"): cancelled, with the reason.
 * - `JobSnooze`: run again after a delay without spending an attempt (e.g. `Retry-After`).
 * - any other failure, a defect, or the per-job timeout: retried with backoff, discarded after
 *   `maxAttempts`. Every attempt's error is kept on the row.
 * - args that do not decode: discarded at once, never retried (retrying cannot fix them).
 */
import type { Duration, Effect } from "effect"
import { Schema } from "effect"

export class JobCancel extends Schema.TaggedError<JobCancel>()("JobCancel", { reason: Schema.String }) {
  override get message() {
    return `cancelled: ${this.reason}`
  }
}

export class JobSnooze extends Schema.TaggedError<JobSnooze>()("JobSnooze", { delay: Schema.Duration }) {}

/** What a running job knows about itself. */
export interface JobInfo {
  readonly id: bigint
  readonly kind: string
  readonly queue: string
  readonly attempt: number
  readonly maxAttempts: number
  readonly createdAt: Date
}

export interface JobKind<A = unknown, E = unknown, R = never> {
  readonly kind: string
  readonly args: Schema.Decoder<A>
  readonly run: (args: A, job: JobInfo) => Effect.Effect<void, E | JobCancel | JobSnooze, R>
  /**
   * Interrupts a run that takes longer (counts as a failed attempt). Default 5 minutes. The worker
   * checks deadlines every tenth of its shortest kind timeout (10 ms to 1 s), so a run may overstay
   * by up to that.
   */
  readonly timeout?: Duration.Input
  /**
   * Delay before the next attempt after the job's `failures`-th failed attempt (snoozes and
   * releases spend no attempt, so they do not count). Default: `JobBackoff.exponential`.
   */
  readonly retryDelay?: (failures: number) => Duration.Duration
}

/** Defines a job kind; the type parameters follow from the schema and the run function. */
export const make = <A, E, R>(kind: JobKind<A, E, R>): JobKind<A, E, R> => kind
