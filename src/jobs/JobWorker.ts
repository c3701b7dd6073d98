/**
 * The job runtime: claims jobs in batches, runs them under a per-queue concurrency limit (a fiber
 * per busy slot), and records outcomes in batches, every change after a claim compare-and-set.
 * This module composes the pieces, each its own module (River's split):
 *
 *   JobFetcher (per queue): wake (NOTIFY on `jobs` with the queue's name, reconnect, poll, a freed
 *     slot after a full fetch) -> claim up to the free slots (plus the prefetch room) -> a fiber
 *     per busy slot (held jobs wait and run in turn in a slot's fiber)
 *       -> JobExecutor: one attempt -> its outcome (`JobOutcome.outcomeOf`, pure)
 *       -> JobCompleter: takes whatever outcomes are waiting (one or a thousand) -> one statement
 *          (completed jobs are deleted, see `JobFinalize`); an outcome the database refuses is
 *          split off and recorded as a placeholder
 *   JobWatchdog: interrupts attempts past their kind's timeout, and every attempt while fenced
 *   JobFence: until when this worker's lease is surely live; within a sixth of the lease of that
 *     without a newer renewal, the worker stops its attempts and claims nothing until one succeeds
 *   JobMaintenance: heartbeat renews this worker's lease (not while outcomes are stuck); rescuer
 *     puts back jobs of workers whose lease expired, and samples queue depths; backend check puts
 *     back jobs of workers whose recorded backend is gone (`JobBackendRescue`); cleaner
 *   JobLiveness: records the backend of the process's LISTEN connection in this worker's row, and
 *     fences the worker the moment that backend may be gone
 *
 * Prefetch (per queue, off by default): a claim may also take up to `prefetch` jobs beyond the free
 * slots, which wait in the worker and start as slots free, without a round trip each. The held
 * jobs are claimed like running ones (attempt counted, this worker's lease covers them): another
 * worker cannot take them even when it idles, a crash gets them rescued after the lease, and
 * shutdown puts them back without spending their attempt. Refetching waits until at most half the
 * prefetch is left, so that claims stay large. Worth it for many short jobs, where a claim's round
 * trip costs more than the jobs it brings; for long jobs it only delays them.
 *
 * A worker whose outcomes cannot be recorded gives its jobs up: once the completer's batch in hand
 * has waited more than a lease, the heartbeat stops renewing the lease and the fetchers stop
 * claiming, so that the rescuer puts the jobs back (see `JobMaintenance`).
 *
 * A job never runs past its worker's lease, so never beside its rescued run elsewhere: whatever
 * keeps the lease from being renewed (that, the database away, a renewal waiting on a lock), the
 * fence interrupts the running attempts before the lease can lapse (see `JobFence`).
 *
 * Shutdown (the layer's scope closing, e.g. on SIGTERM) ends within `shutdownTimeout` plus one
 * lease, whatever the database does: stop claiming, let running jobs finish up to
 * `shutdownTimeout`, interrupt the rest and put them back without spending their attempt; record
 * every outcome within two thirds of a lease (what is still unrecorded then is given up, logged
 * with its job id, and left to the rescuer), then release the lease within the last third (if
 * that fails too, the lease runs out by itself).
 *
 * Scheduling uses the worker's `Clock` (retry and snooze times, and "due" when claiming), so
 * `TestClock` drives backoff in tests; set it to the wall-clock time first, since rows inserted
 * without a time are due at the database's `now()`.
 */
import { randomUUID } from "node:crypto"
import { hostname } from "node:os"
import { Array as Arr, Clock, Context, Duration, Effect, Fiber, FiberSet, Layer } from "effect"
import * as JobCompleter from "./JobCompleter.ts"
import * as JobExecutor from "./JobExecutor.ts"
import * as JobFence from "./JobFence.ts"
import * as JobFetcher from "./JobFetcher.ts"
import type { JobKind } from "./JobKind.ts"
import * as JobLease from "./JobLease.ts"
import * as JobLiveness from "./JobLiveness.ts"
import * as JobMaintenance from "./JobMaintenance.ts"
import * as JobMetrics from "./JobMetrics.ts"
import * as JobsInHand from "./JobsInHand.ts"
import * as JobWatchdog from "./JobWatchdog.ts"

export interface JobWorkerOptions<R> {
  // biome-ignore lint/suspicious/noExplicitAny: kinds differ in their args and errors
  readonly kinds: ReadonlyArray<JobKind<any, any, R>>
  /** Queues this worker serves and their concurrency. Default `{ default: { concurrency: 10 } }`. */
  readonly queues?: Readonly<Record<string, JobFetcher.QueueOptions>>
  /** Fetch without a notification this often (scheduled and retried jobs become due). Default 1 s. */
  readonly pollInterval?: Duration.Input
  /**
   * How long this worker's jobs survive its silence before they are rescued. Default 10 s. A
   * worker whose process died is rescued sooner, by its backend (`JobBackendRescue`); the lease is
   * for a hung one, and for workers behind a pooler.
   */
  readonly lease?: Duration.Input
  /** How long shutdown lets running jobs finish before interrupting them. Default 10 s. */
  readonly shutdownTimeout?: Duration.Input
  /**
   * How long completed jobs with a unique key stay (default 1 h; those without one are deleted as
   * they complete), and cancelled or discarded ones (default 7 days).
   */
  readonly completedRetention?: Duration.Input
  readonly deadRetention?: Duration.Input
  /** How often the cleaner runs. Default 1 minute. */
  readonly cleanerInterval?: Duration.Input
  readonly workerId?: string
  /** Observes each recorded batch of outcomes, with what became of each (`JobCompleter.Recorded`). */
  readonly onFinalized?: (batch: ReadonlyArray<JobCompleter.Reported>) => Effect.Effect<void>
}

export type QueueOptions = JobFetcher.QueueOptions

export class JobWorker extends Context.Service<
  JobWorker,
  {
    readonly id: string
    /** The kinds of job this worker runs. */
    readonly kinds: ReadonlyArray<string>
    /** Jobs running in this worker now. */
    readonly running: Effect.Effect<number>
  }
>()("bothy/JobWorker") {}

/** Stops the fetchers, lets their jobs finish or interrupts them, records the outcomes, releases the lease. */
const shutdown = (
  fetchers: ReadonlyArray<JobFetcher.JobFetcher>,
  completer: JobCompleter.JobCompleter,
  background: ReadonlyArray<Fiber.Fiber<unknown, unknown>>,
  { id, leaseMillis, shutdownTimeout }: { id: string; leaseMillis: number; shutdownTimeout: Duration.Input },
) =>
  Effect.gen(function* () {
    yield* Effect.forEach(fetchers, (f) => f.stop, { discard: true })
    yield* Effect.forEach(fetchers, (f) => FiberSet.awaitEmpty(f.jobs), { discard: true }).pipe(
      Effect.timeout(shutdownTimeout),
      Effect.ignore,
    )
    yield* Effect.forEach(fetchers, (f) => FiberSet.clear(f.jobs), { discard: true })
    yield* completer.close(Duration.millis((leaseMillis * 2) / 3))
    yield* Effect.forEach(background, Fiber.interrupt, { discard: true })
    yield* JobLease.release(id).pipe(Effect.timeout(Duration.millis(leaseMillis / 3)), Effect.ignore)
  })

export const layer = <R>(options: JobWorkerOptions<R>) =>
  Layer.effect(
    JobWorker,
    Effect.gen(function* () {
      const id = options.workerId ?? `${hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`
      const leaseMillis = Duration.toMillis(options.lease ?? Duration.seconds(10))
      if (!Arr.isReadonlyArrayNonEmpty(options.kinds)) {
        return yield* Effect.die("JobWorker.layer needs at least one job kind")
      }

      const sentAt = yield* Clock.currentTimeMillis
      yield* JobLease.renew(id, leaseMillis)
      const fence = JobFence.make({ workerId: id, leaseMillis, sentAt })
      const liveness = yield* JobLiveness.make(id, fence)
      // Every outcome waiting when the completer is free goes out in one statement.
      const inHand = JobsInHand.make()
      const completer = yield* JobCompleter.make({
        onFinalized: (batch) =>
          Effect.suspend(() => {
            for (const f of batch) inHand.finished(f.id)
            return options.onFinalized?.(batch) ?? Effect.void
          }),
      })
      const watchdog = JobWatchdog.make(options.kinds.map(JobExecutor.timeoutMillis), fence)
      const executor = JobExecutor.make(options.kinds, completer, watchdog)
      const context: JobFetcher.FetcherContext<R> = {
        workerId: id,
        executor,
        completer,
        outcomesStuck: (now) => JobMaintenance.outcomesStuck(completer, leaseMillis, now),
        fence,
        inHand,
        pollInterval: options.pollInterval ?? Duration.seconds(1),
      }
      const queues = Object.entries(options.queues ?? { default: { concurrency: 10 } })
      const kinds = options.kinds.map((k) => k.kind)
      yield* JobMetrics.atZero(
        kinds,
        queues.map(([queue]) => queue),
      )
      const fetchers = yield* Effect.forEach(queues, ([queue, q]) => JobFetcher.make(queue, q, context))
      const maintenance = JobMaintenance.tasks({
        workerId: id,
        leaseMillis,
        completer,
        fence,
        inHand,
        liveness,
        completedRetentionMillis: Duration.toMillis(options.completedRetention ?? Duration.hours(1)),
        deadRetentionMillis: Duration.toMillis(options.deadRetention ?? Duration.days(7)),
        cleanerInterval: options.cleanerInterval ?? Duration.minutes(1),
      })
      const background = yield* Effect.forEach([watchdog.run, ...maintenance], (task) => Effect.forkScoped(task))

      // Registered last, so it runs first when the scope closes, before the fibers above stop.
      const shutdownTimeout = options.shutdownTimeout ?? Duration.seconds(10)
      yield* Effect.addFinalizer(() => shutdown(fetchers, completer, background, { id, leaseMillis, shutdownTimeout }))

      return JobWorker.of({
        id,
        kinds,
        running: Effect.sync(() => fetchers.reduce((n, f) => n + f.running(), 0)),
      })
    }),
  )
