/**
 * The job runtime: claims jobs in batches, runs them under a per-queue concurrency limit (a fiber
 * per busy slot), and records outcomes in batches, every change after a claim compare-and-set.
 *
 *   per queue: wake (NOTIFY on `jobs` with the queue's name, reconnect, poll, a freed slot after a
 *   full fetch) -> claim up to the free slots (plus the prefetch room) -> a fiber per job (held
 *   jobs wait and run in turn in a slot's fiber) -> outcome -> completer
 *   completer: takes whatever outcomes are waiting (one or a thousand) -> one statement (completed
 *   jobs are deleted, see `JobFinalize`) -> repeat; an outcome the database refuses is split off
 *   and recorded as a placeholder (see `JobCompleter`)
 *   heartbeat: renews this worker's lease; rescuer: puts back jobs of workers whose lease expired
 *   watchdog: interrupts attempts past their kind's timeout
 *
 * Wake-ups coalesce in a one-slot queue: the first notification starts a fetch at once, and any
 * number arriving during it cause exactly one more; there is no fixed cooldown.
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
 * has waited more than a lease (the database refuses or blocks it), the heartbeat stops renewing
 * the lease and the fetchers stop claiming, so that the lease runs out and the rescuer (of any
 * worker) puts the jobs back instead of leaving them `running` under a live lease. Both resume
 * once the batch is recorded.
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
import {
  Array as Arr,
  Cause,
  Clock,
  Context,
  Duration,
  Effect,
  Exit,
  Fiber,
  FiberSet,
  Layer,
  Metric,
  Option,
  Queue,
  Schedule,
  Schema,
  Tracer,
} from "effect"
import { SqlClient } from "effect/sql"
import { NotificationStream } from "../platform/NotificationStream.ts"
import * as JobBackoff from "./JobBackoff.ts"
import { type ClaimedJob, claim } from "./JobClaim.ts"
import * as JobCleaner from "./JobCleaner.ts"
import * as JobCompleter from "./JobCompleter.ts"
import type { AttemptError, Outcome } from "./JobFinalize.ts"
import { JobCancel, type JobInfo, type JobKind, JobSnooze } from "./JobKind.ts"
import * as JobLease from "./JobLease.ts"
import * as JobMetrics from "./JobMetrics.ts"

export interface JobWorkerOptions<R> {
  // biome-ignore lint/suspicious/noExplicitAny: kinds differ in their args and errors
  readonly kinds: ReadonlyArray<JobKind<any, any, R>>
  /** Queues this worker serves and their concurrency. Default `{ default: { concurrency: 10 } }`. */
  readonly queues?: Readonly<Record<string, QueueOptions>>
  /** Fetch without a notification this often (scheduled and retried jobs become due). Default 1 s. */
  readonly pollInterval?: Duration.Input
  /** How long this worker's jobs survive its silence before they are rescued. Default 10 s. */
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

export interface QueueOptions {
  /** Jobs of this queue that run at once in this worker. */
  readonly concurrency: number
  /**
   * Claimed jobs this worker may hold beyond its free slots, each waiting for a slot. Default 0:
   * claim only up to the free slots. See the module header for the trade-off.
   */
  readonly prefetch?: number
}

export class JobWorker extends Context.Service<
  JobWorker,
  {
    readonly id: string
    /** Jobs running in this worker now. */
    readonly running: Effect.Effect<number>
  }
>()("bothy/JobWorker") {}

const defaultTimeout = Duration.minutes(5)

const traceParentSpan = (traceParent: string | null) => {
  const parts = traceParent?.split("-")
  return parts?.length === 4
    ? Option.some(Tracer.externalSpan({ traceId: parts[1]!, spanId: parts[2]!, sampled: parts[3] === "01" }))
    : Option.none()
}

export const layer = <R>(options: JobWorkerOptions<R>) =>
  Layer.effect(
    JobWorker,
    Effect.gen(function* () {
      const notifications = yield* NotificationStream
      const sql = yield* SqlClient.SqlClient
      const id = options.workerId ?? `${hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`
      const leaseMillis = Duration.toMillis(options.lease ?? Duration.seconds(10))
      const pollInterval = options.pollInterval ?? Duration.seconds(1)
      const queues = Object.entries(options.queues ?? { default: { concurrency: 10 } })
      // What an attempt of each kind needs, made once rather than per job: its args decoder and its
      // metrics with the kind attribute (a metric keeps its series key cached per instance).
      const kinds = new Map(
        options.kinds.map((kind) => {
          const tagged = <I, S>(metric: Metric.Metric<I, S>) => Metric.withAttributes(metric, { kind: kind.kind })
          const outcomes: Record<Outcome["_tag"], Metric.Metric<number, unknown> | undefined> = {
            Completed: tagged(JobMetrics.completed),
            Cancelled: tagged(JobMetrics.cancelled),
            Discarded: tagged(JobMetrics.discarded),
            Retry: tagged(JobMetrics.retried),
            Snooze: tagged(JobMetrics.snoozed),
            Release: undefined,
          }
          return [
            kind.kind,
            {
              kind,
              decode: Schema.decodeUnknownExit(kind.args),
              timeoutMillis: Duration.toMillis(kind.timeout ?? defaultTimeout),
              claimed: tagged(JobMetrics.claimed),
              insertToStart: tagged(JobMetrics.insertToStart),
              startToFinish: tagged(JobMetrics.startToFinish),
              outcomes,
            },
          ] as const
        }),
      )
      const kindNames = Array.from(kinds.keys())
      if (!Arr.isReadonlyArrayNonEmpty(kindNames))
        return yield* Effect.die("JobWorker.layer needs at least one job kind")
      const defaultDelay = JobBackoff.exponential()

      // Per-attempt timeouts: one watchdog that wakes every `watchTick` by the worker's Clock and
      // interrupts the attempts past their deadline, rather than a timer and two racing fibers per
      // attempt (what `Effect.timeout` costs: more than a short job). So an attempt runs up to one
      // tick, a tenth of the shortest timeout (at least 10 ms, at most 1 s), past its timeout.
      const watched = new Set<{
        readonly fiber: Fiber.Fiber<unknown, unknown>
        readonly deadline: number
        timedOut: boolean
      }>()
      const watchTick = Math.min(
        1000,
        Math.max(10, Math.min(...Array.from(kinds.values(), (k) => k.timeoutMillis)) / 10),
      )

      yield* JobLease.renew(id, leaseMillis)

      // Every outcome waiting when the completer is free goes out in one statement.
      const completer = yield* JobCompleter.make({ onFinalized: options.onFinalized })
      // The batch in hand has waited more than a lease: give the jobs up (see the module header).
      const outcomesStuck = (now: number) => completer.waited(now) > leaseMillis
      let lapsing = false
      const heartbeat = Effect.gen(function* () {
        const now = yield* Clock.currentTimeMillis
        if (outcomesStuck(now)) {
          if (!lapsing) {
            yield* Effect.logError(
              `jobs: outcomes have waited ${Math.round(completer.waited(now) / 1000)} s to be recorded; worker ${id} stops renewing its lease and claiming until they are, so that its jobs are rescued`,
            )
          }
          lapsing = true
          return
        }
        yield* JobLease.renew(id, leaseMillis)
        if (lapsing) yield* Effect.logWarning(`jobs: outcomes are recorded again; worker ${id} renewed its lease`)
        lapsing = false
      })

      const errorOf = (job: ClaimedJob, kind: AttemptError["kind"], message: string, now: number): AttemptError => ({
        attempt: job.attempt,
        at: new Date(now).toISOString(),
        kind,
        message,
      })

      const retryOrDiscard = (
        job: ClaimedJob,
        error: AttemptError,
        now: number,
        kind: { readonly retryDelay?: (attempt: number) => Duration.Duration },
      ): Outcome =>
        job.attempt >= job.maxAttempts
          ? { _tag: "Discarded", error }
          : {
              _tag: "Retry",
              at: new Date(now + Duration.toMillis((kind.retryDelay ?? defaultDelay)(job.attempt))),
              error,
            }

      const outcomeOf = (
        job: ClaimedJob,
        kind: { readonly retryDelay?: (attempt: number) => Duration.Duration },
        exit: Exit.Exit<void, unknown>,
        now: number,
      ): Outcome => {
        if (Exit.isSuccess(exit)) return { _tag: "Completed" }
        const failure = Cause.findErrorOption(exit.cause)
        if (Option.isSome(failure)) {
          const e = failure.value
          if (e instanceof JobCancel) return { _tag: "Cancelled", error: errorOf(job, "cancelled", e.reason, now) }
          if (e instanceof JobSnooze) return { _tag: "Snooze", at: new Date(now + Duration.toMillis(e.delay)) }
          if (Cause.isTimeoutError(e)) {
            return retryOrDiscard(job, errorOf(job, "timeout", "the attempt exceeded its timeout", now), now, kind)
          }
          const message = e instanceof Error ? e.message : String(e)
          return retryOrDiscard(job, errorOf(job, "failure", message, now), now, kind)
        }
        return retryOrDiscard(job, errorOf(job, "defect", Cause.pretty(exit.cause), now), now, kind)
      }

      /**
       * Runs one attempt; whatever happens becomes an outcome on `finished`, never an error. This is
       * the hot path for short jobs, so its bookkeeping is synchronous: clock and metrics read from
       * the job's fiber, the outcome offered without suspending.
       *
       * `claimedAt`: this worker's clock when the claim returned, to add any time the job was held.
       */
      const runJob = (job: ClaimedJob, claimedAt: number) =>
        Effect.withFiber((fiber) => {
          // Claims ask only for the kinds in this map.
          const perKind = kinds.get(job.kind)!
          const { kind } = perKind
          const context = fiber.context
          const clock = fiber.getRef(Clock.Clock)
          const started = clock.currentTimeMillisUnsafe()
          perKind.claimed.updateUnsafe(1, context)
          if (job.attempt === 1) {
            const insertToStart = job.attemptedAt.getTime() - job.createdAt.getTime() + (started - claimedAt)
            perKind.insertToStart.updateUnsafe(insertToStart, context)
          }
          const watch = { fiber, deadline: started + perKind.timeoutMillis, timedOut: false }
          const record = (outcome: Outcome) => {
            watched.delete(watch)
            perKind.startToFinish.updateUnsafe(clock.currentTimeMillisUnsafe() - started, context)
            perKind.outcomes[outcome._tag]?.updateUnsafe(1, context)
            completer.offer({ id: job.id, attempt: job.attempt, outcome })
          }
          const args = perKind.decode(job.args)
          if (Exit.isFailure(args)) {
            const message = `args do not decode: ${Cause.pretty(args.cause)}`
            record({ _tag: "Discarded", error: errorOf(job, "bad_args", message, started) })
            return Effect.void
          }
          const info: JobInfo = {
            id: job.id,
            kind: job.kind,
            queue: job.queue,
            attempt: job.attempt,
            maxAttempts: job.maxAttempts,
            createdAt: job.createdAt,
          }
          const parent = traceParentSpan(job.traceParent)
          watched.add(watch)
          return kind.run(args.value, info).pipe(
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
            Effect.map((exit) => record(outcomeOf(job, kind, exit, clock.currentTimeMillisUnsafe()))),
            // The watchdog interrupted it: a failed attempt. Otherwise shutdown did: put it back for
            // another worker, its attempt not spent.
            Effect.onInterrupt(() =>
              Effect.sync(() => {
                const now = clock.currentTimeMillisUnsafe()
                if (watch.timedOut) {
                  const error = errorOf(job, "timeout", "the attempt exceeded its timeout", now)
                  return record(retryOrDiscard(job, error, now, kind))
                }
                watched.delete(watch)
                const error = errorOf(job, "interrupted", "the worker shut down while the job ran", now)
                completer.offer({
                  id: job.id,
                  attempt: job.attempt,
                  outcome: { _tag: "Release", at: new Date(now), error },
                })
              }),
            ),
          )
        })

      const producer = (queue: string, { concurrency, prefetch = 0 }: QueueOptions) =>
        Effect.gen(function* () {
          const jobs = yield* FiberSet.make()
          const wake = yield* Queue.sliding<void>(1)
          const poke = Queue.offer(wake, undefined).pipe(Effect.asVoid)
          // Claimed jobs waiting for a slot (prefetch only); non-empty only while every slot is busy.
          const held: Array<{ readonly job: ClaimedJob; readonly claimedAt: number }> = []
          const lowWater = Math.floor(prefetch / 2)
          let running = 0
          let mayHaveMore = true
          let stopping = false
          // A slot asked for a refill; a claim is in flight.
          let refilling = false
          let claiming = false
          // A slot's fiber runs its job, then any held ones, one after another, and frees the slot
          // when none is left: with prefetch, no fiber per job. Without prefetch a job starts at once,
          // inside the claiming fiber; with it, through the scheduler, so that the fetcher can send
          // the next claim while the held jobs run.
          const start = (job: ClaimedJob, claimedAt: number) => {
            running++
            const slot = Effect.gen(function* () {
              let next: { readonly job: ClaimedJob; readonly claimedAt: number } | undefined = { job, claimedAt }
              while (next !== undefined) {
                yield* runJob(next.job, next.claimedAt)
                next = stopping ? undefined : held.shift()
                if (next !== undefined && mayHaveMore && held.length <= lowWater && !claiming) {
                  // Time to refill: every slot yields until the fetcher has sent its claim, which
                  // otherwise waits behind the slots' next jobs until the held ones run out.
                  if (!refilling) {
                    refilling = true
                    yield* poke
                  }
                  yield* Effect.yieldNow
                }
              }
            })
            return FiberSet.run(jobs, Effect.ensuring(slot, freed), { startImmediately: prefetch === 0 })
          }
          // A wake-up from outside says there may be new jobs, whatever the last claim found.
          const wakeUp = Effect.suspend(() => {
            mayHaveMore = true
            return poke
          })
          const freed: Effect.Effect<void, never, Exclude<R, Tracer.ParentSpan>> = Effect.suspend(() => {
            running--
            // Jobs held after this slot last looked (it may yield on its way out) take the slot.
            const next = stopping ? undefined : held.shift()
            const refill = mayHaveMore && held.length <= lowWater ? poke : Effect.void
            return next === undefined ? refill : Effect.andThen(start(next.job, next.claimedAt), refill)
          })
          const fetch = Effect.gen(function* () {
            for (;;) {
              const now = yield* Clock.currentTimeMillis
              const room = concurrency - running + prefetch - held.length
              if (room <= 0 || held.length > lowWater || outcomesStuck(now)) {
                refilling = false
                return
              }
              claiming = true
              const claimed = yield* claim(queue, kindNames, room, id, new Date(now)).pipe(
                Effect.ensuring(
                  Effect.sync(() => {
                    claiming = false
                    refilling = false
                  }),
                ),
              )
              const claimedAt = yield* Clock.currentTimeMillis
              mayHaveMore = claimed.length === room
              for (const job of claimed) {
                if (running < concurrency) yield* start(job, claimedAt)
                else held.push({ job, claimedAt })
              }
              if (!mayHaveMore) return
            }
          })
          yield* notifications.subscribe("jobs", (w) =>
            w._tag === "Connected" || w.payload === queue ? wakeUp : Effect.void,
          )
          const fetcher = yield* Queue.take(wake).pipe(
            Effect.andThen(fetch),
            Effect.catchCause((cause) => Effect.logError(`jobs: fetching from queue ${queue} failed`, cause)),
            Effect.forever,
            Effect.forkScoped,
          )
          const poller = yield* wakeUp.pipe(Effect.delay(pollInterval), Effect.forever, Effect.forkScoped)
          yield* poke
          // Stops claiming and starting; the held jobs never started, so they go back at once.
          const stop = Effect.gen(function* () {
            stopping = true
            yield* Fiber.interrupt(fetcher)
            yield* Fiber.interrupt(poller)
            const now = yield* Clock.currentTimeMillis
            for (const { job } of held.splice(0)) {
              completer.offer({
                id: job.id,
                attempt: job.attempt,
                outcome: {
                  _tag: "Release",
                  at: new Date(now),
                  error: errorOf(job, "interrupted", "the worker shut down before it started the job", now),
                },
              })
            }
          })
          return { jobs, stop, running: () => running }
        })

      const producers = yield* Effect.forEach(queues, ([queue, options]) => producer(queue, options))

      const background = yield* Effect.all(
        [
          Effect.gen(function* () {
            const now = yield* Clock.currentTimeMillis
            for (const watch of watched) {
              if (!watch.timedOut && now >= watch.deadline) {
                watch.timedOut = true
                watch.fiber.interruptUnsafe()
              }
            }
          }).pipe(Effect.delay(Duration.millis(watchTick)), Effect.forever),
          heartbeat.pipe(
            Effect.catchCause((cause) => Effect.logWarning("jobs: lease renewal failed", cause)),
            Effect.repeat(Schedule.spaced(Duration.millis(leaseMillis / 3))),
          ),
          Effect.gen(function* () {
            const rescued = yield* JobLease.rescue()
            if (rescued.length > 0) {
              yield* Metric.update(JobMetrics.rescued, rescued.length)
              yield* Effect.logWarning(`jobs: rescued ${rescued.length} jobs of workers whose lease expired`)
            }
            const depths = yield* sql<{ queue: string; n: number }>`
              SELECT queue, count(*)::int AS n FROM jobs
              WHERE state IN ('available', 'scheduled', 'retryable') GROUP BY queue`
            for (const { queue, n } of depths) {
              yield* Metric.update(Metric.withAttributes(JobMetrics.queueDepth, { queue }), n)
            }
          }).pipe(
            Effect.catchCause((cause) => Effect.logWarning("jobs: rescue failed", cause)),
            Effect.repeat(Schedule.spaced(Duration.millis(leaseMillis / 2))),
          ),
          JobCleaner.clean(
            Duration.toMillis(options.completedRetention ?? Duration.hours(1)),
            Duration.toMillis(options.deadRetention ?? Duration.days(7)),
          ).pipe(
            Effect.catchCause((cause) => Effect.logWarning("jobs: cleaner failed", cause)),
            Effect.repeat(Schedule.spaced(options.cleanerInterval ?? Duration.minutes(1))),
          ),
        ].map((task) => Effect.forkScoped(task)),
      )

      // Registered last, so it runs first when the scope closes, before the fibers above stop.
      yield* Effect.addFinalizer(() =>
        Effect.gen(function* () {
          yield* Effect.forEach(producers, (p) => p.stop, { discard: true })
          yield* Effect.forEach(producers, (p) => FiberSet.awaitEmpty(p.jobs), { discard: true }).pipe(
            Effect.timeout(options.shutdownTimeout ?? Duration.seconds(10)),
            Effect.ignore,
          )
          yield* Effect.forEach(producers, (p) => FiberSet.clear(p.jobs), { discard: true })
          yield* completer.close(Duration.millis((leaseMillis * 2) / 3))
          yield* Effect.forEach(background, Fiber.interrupt, { discard: true })
          yield* JobLease.release(id).pipe(Effect.timeout(Duration.millis(leaseMillis / 3)), Effect.ignore)
        }),
      )

      return JobWorker.of({
        id,
        running: Effect.sync(() => producers.reduce((n, p) => n + p.running(), 0)),
      })
    }),
  )
