/**
 * The executor: runs one attempt of a claimed job and hands what became of it to the completer.
 * Whatever the run does (succeeds, fails, dies, overstays its timeout, is interrupted by shutdown)
 * ends as exactly one outcome offered to the completer, never as an error of the attempt's fiber.
 *
 *   decode args --fails--> Discarded (bad_args)
 *        |
 *   run under the watchdog, in a span (child of the job's traceparent)
 *        |-- exit ----------------------> `JobOutcome.outcomeOf`
 *        |-- interrupted, timed out ----> Retry / Discarded (timeout)
 *        |-- interrupted by the fence --> Release (interrupted, its attempt not spent)
 *        `-- interrupted by shutdown ---> Release (interrupted, its attempt not spent)
 *
 * This is the hot path for short jobs, so its bookkeeping is synchronous: clock and metrics read
 * from the job's fiber, the outcome offered without suspending, and what each kind needs (its args
 * decoder, its retry delay, its metrics with the kind attribute) made once, not per job.
 */
import { Array as Arr, Cause, Clock, Duration, Effect, Exit, Metric, Option, Schema, type Tracer } from "effect"
import * as TraceParent from "../platform/TraceParent.ts"
import * as JobBackoff from "./JobBackoff.ts"
import type { ClaimedJob } from "./JobClaim.ts"
import type { JobCompleter } from "./JobCompleter.ts"
import type { Outcome } from "./JobFinalize.ts"
import type { JobInfo, JobKind } from "./JobKind.ts"
import * as JobMetrics from "./JobMetrics.ts"
import { errorOf, outcomeOf, type RetryDelay, retryOrDiscard, timeoutMessage } from "./JobOutcome.ts"
import type { JobWatchdog, Watch } from "./JobWatchdog.ts"

const defaultTimeout = Duration.minutes(5)

export const fencedMessage = "the worker stopped the job before its lease could lapse: the lease could not be renewed"

export const backendLostMessage =
  "the worker stopped the job because its backend may be gone, after which other workers put the job back"

/** A kind's timeout (default 5 minutes), in milliseconds. */
// biome-ignore lint/suspicious/noExplicitAny: kinds differ in their args and errors
export const timeoutMillis = (kind: JobKind<any, any, any>) => Duration.toMillis(kind.timeout ?? defaultTimeout)

/** A kind's metrics with its kind attribute (a metric keeps its series key cached per instance). */
const kindMetrics = (kind: string) => {
  const tagged = <I, S>(metric: Metric.Metric<I, S>) => Metric.withAttributes(metric, { kind })
  const outcomes: Record<Outcome["_tag"], Metric.Metric<number, unknown> | undefined> = {
    Completed: tagged(JobMetrics.completed),
    Cancelled: tagged(JobMetrics.cancelled),
    Discarded: tagged(JobMetrics.discarded),
    Retry: tagged(JobMetrics.retried),
    Snooze: tagged(JobMetrics.snoozed),
    Release: undefined,
  }
  return {
    claimed: tagged(JobMetrics.claimed),
    insertToStart: tagged(JobMetrics.insertToStart),
    startToFinish: tagged(JobMetrics.startToFinish),
    outcomes,
  }
}

/** What an attempt of a kind needs, made once per worker. */
interface KindRuntime<R> {
  // biome-ignore lint/suspicious/noExplicitAny: kinds differ in their args and errors
  readonly kind: JobKind<any, any, R>
  readonly decode: (input: unknown) => Exit.Exit<unknown, Schema.SchemaError>
  readonly timeoutMillis: number
  readonly retryDelay: RetryDelay
  readonly metrics: ReturnType<typeof kindMetrics>
}

export interface JobExecutor<R> {
  /** The kinds this worker runs: the only ones it claims. */
  readonly kindNames: Arr.NonEmptyReadonlyArray<string>
  /**
   * Runs one attempt; never fails. `claimedAt`: this worker's clock when the claim returned, to add
   * any time the job was held.
   */
  readonly run: (job: ClaimedJob, claimedAt: number) => Effect.Effect<void, never, Exclude<R, Tracer.ParentSpan>>
}

// biome-ignore lint/suspicious/noExplicitAny: kinds differ in their args and errors
const kindRuntimes = <R>(kinds: ReadonlyArray<JobKind<any, any, R>>): Map<string, KindRuntime<R>> => {
  const defaultDelay = JobBackoff.exponential()
  return new Map(
    kinds.map((kind) => [
      kind.kind,
      {
        kind,
        decode: Schema.decodeUnknownExit(kind.args),
        timeoutMillis: timeoutMillis(kind),
        retryDelay: kind.retryDelay ?? defaultDelay,
        metrics: kindMetrics(kind.kind),
      },
    ]),
  )
}

const infoOf = (job: ClaimedJob): JobInfo => ({
  id: job.id,
  kind: job.kind,
  queue: job.queue,
  attempt: job.attempt,
  maxAttempts: job.maxAttempts,
  createdAt: job.createdAt,
})

export const make = <R>(
  // biome-ignore lint/suspicious/noExplicitAny: kinds differ in their args and errors
  kinds: Arr.NonEmptyReadonlyArray<JobKind<any, any, R>>,
  completer: JobCompleter,
  watchdog: JobWatchdog,
): JobExecutor<R> => {
  const runtimes = kindRuntimes(kinds)

  const run = (job: ClaimedJob, claimedAt: number) =>
    Effect.withFiber((fiber) => {
      // Claims ask only for the kinds in this map.
      const perKind = runtimes.get(job.kind)!
      const { metrics, retryDelay } = perKind
      const context = fiber.context
      const clock = fiber.getRef(Clock.Clock)
      const started = clock.currentTimeMillisUnsafe()
      metrics.claimed.updateUnsafe(1, context)
      if (job.attempt === 1) {
        const insertToStart = job.attemptedAt.getTime() - job.createdAt.getTime() + (started - claimedAt)
        metrics.insertToStart.updateUnsafe(insertToStart / 1000, context)
      }
      const watch: Watch = { fiber, deadline: started + perKind.timeoutMillis, stoppedBy: undefined }
      const record = (outcome: Outcome) => {
        watchdog.delete(watch)
        metrics.startToFinish.updateUnsafe((clock.currentTimeMillisUnsafe() - started) / 1000, context)
        metrics.outcomes[outcome._tag]?.updateUnsafe(1, context)
        completer.offer({ id: job.id, attempt: job.attempt, outcome })
      }
      const args = perKind.decode(job.args)
      if (Exit.isFailure(args)) {
        const message = `args do not decode: ${Cause.pretty(args.cause)}`
        record({ _tag: "Discarded", error: errorOf(job, "bad_args", message, started) })
        return Effect.void
      }
      const parent = TraceParent.parse(job.traceParent)
      watchdog.add(watch)
      return perKind.kind.run(args.value, infoOf(job)).pipe(
        Effect.withSpan(
          "Job.run",
          {
            attributes: { "job.kind": job.kind, "job.id": String(job.id), "job.attempt": job.attempt },
            ...(Option.isSome(parent) ? { parent: parent.value } : {}),
          },
          // The span's source is always this line; capturing it per job costs more than a short job.
          { captureStackTrace: false },
        ),
        Effect.exit,
        Effect.map((exit) => record(outcomeOf(job, exit, clock.currentTimeMillisUnsafe(), retryDelay))),
        // Past its timeout: a failed attempt. Otherwise the fence or shutdown interrupted it: put
        // it back for another worker, its attempt not spent.
        Effect.onInterrupt(() =>
          Effect.sync(() => {
            const now = clock.currentTimeMillisUnsafe()
            if (watch.stoppedBy === "timeout")
              return record(retryOrDiscard(job, errorOf(job, "timeout", timeoutMessage, now), now, retryDelay))
            watchdog.delete(watch)
            const why =
              watch.stoppedBy === "fence"
                ? fencedMessage
                : watch.stoppedBy === "backend"
                  ? backendLostMessage
                  : "the worker shut down while the job ran"
            const error = errorOf(job, "interrupted", why, now)
            completer.offer({
              id: job.id,
              attempt: job.attempt,
              outcome: { _tag: "Release", at: new Date(now), error },
            })
          }),
        ),
      )
    })

  return {
    kindNames: Arr.dedupe(Arr.map(kinds, (k) => k.kind)),
    run,
  }
}
