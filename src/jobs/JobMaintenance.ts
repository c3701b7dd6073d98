/**
 * A worker's maintenance, each task its own fiber that logs its failures and goes on:
 *
 *   heartbeat (every third of the lease): renew this worker's lease, unless outcomes are stuck,
 *     and tell the fence (`JobFence`) when a renewal succeeded; a failed renewal is tried again
 *     after a twelfth of the lease, so that one lost connection does not cost the lease
 *   rescuer (every half lease): put back the jobs of workers whose lease expired; sample the
 *     runnable jobs per queue (`bothy.jobs.queue_depth`)
 *   backend check (every `JobBackendRescue.checkInterval`, and when a sighting comes of age): look
 *     for workers whose recorded backend is gone; this worker's own ──> stop its jobs at once
 *     (`JobLiveness`); another's, gone for `JobBackendRescue.grace` ──> put its running jobs back
 *   cleaner (every `cleanerInterval`): remove finished jobs past their retention
 *
 * A worker whose outcomes cannot be recorded gives its jobs up: once the completer's batch in hand
 * has waited more than a lease (the database refuses or blocks it), the outcomes are stuck, the
 * heartbeat stops renewing the lease and the fetchers stop claiming, so that the lease runs out and
 * the rescuer (of any worker) puts the jobs back instead of leaving them `running` under a live
 * lease; before it runs out, the fence stops the jobs still running. Both resume once the batch is
 * recorded.
 */
import { Cause, Clock, Duration, Effect, Metric, Schedule } from "effect"
import { SqlClient } from "effect/sql"
import * as ThrottledWarnings from "../platform/ThrottledWarnings.ts"
import * as JobBackendRescue from "./JobBackendRescue.ts"
import * as JobCleaner from "./JobCleaner.ts"
import type { JobCompleter } from "./JobCompleter.ts"
import type { JobFence } from "./JobFence.ts"
import * as JobLease from "./JobLease.ts"
import type { JobLiveness } from "./JobLiveness.ts"
import * as JobMetrics from "./JobMetrics.ts"
import type { JobsInHand } from "./JobsInHand.ts"

export interface MaintenanceOptions {
  readonly workerId: string
  readonly leaseMillis: number
  readonly completer: JobCompleter
  readonly fence: JobFence
  readonly inHand: JobsInHand
  readonly liveness: JobLiveness
  readonly completedRetentionMillis: number
  readonly deadRetentionMillis: number
  readonly cleanerInterval: Duration.Input
}

/** The batch in hand has waited more than a lease: give the jobs up (see the module header). */
export const outcomesStuck = (completer: JobCompleter, leaseMillis: number, now: number) =>
  completer.waited(now) > leaseMillis

/**
 * Renews the lease while outcomes get recorded; logs once when it stops and once when it resumes.
 * The next renewal goes out a third of the lease after one that succeeded, yet no later than half
 * a lease after that one was sent, so that a slow renewal still leaves time before the fence (and
 * a renewal that took so long that the fence is near goes out again at once); a twelfth of the
 * lease after one that failed; and as soon as stuck outcomes are recorded.
 */
/** After a failed claim, the jobs it may have claimed unknown to this worker go back (see `JobsInHand`). */
const orphans = ({ workerId, leaseMillis, inHand }: MaintenanceOptions, now: number) =>
  Effect.suspend(() => {
    const check = inHand.orphanCheck(now, leaseMillis)
    if (check === undefined) return Effect.void
    return JobLease.releaseOrphans(workerId, check.inHand, leaseMillis).pipe(
      Effect.tap((released) =>
        released.length === 0
          ? Effect.void
          : Metric.update(JobMetrics.rescued, released.length).pipe(
              Effect.andThen(
                Effect.logWarning(
                  `jobs: put back ${released.length} jobs that worker ${workerId} had claimed without getting the claim's answer (ids ${released.map((r) => r.id).join(", ")})`,
                ),
              ),
            ),
      ),
      Effect.tap(() => Effect.sync(check.done)),
      Effect.catchCause((cause) => Effect.logWarning("jobs: putting back unanswered claims failed", cause)),
    )
  })

const heartbeat = (options: MaintenanceOptions) => {
  const { workerId, leaseMillis, completer, fence } = options
  let lapsing = false
  const wait = (millis: number) => (millis > 0 ? Effect.sleep(Duration.millis(millis)) : Effect.yieldNow)
  const beat = Effect.gen(function* () {
    const sentAt = yield* Clock.currentTimeMillis
    if (outcomesStuck(completer, leaseMillis, sentAt)) {
      if (!lapsing) {
        yield* Effect.logError(
          `jobs: outcomes have waited ${Math.round(completer.waited(sentAt) / 1000)} s to be recorded; worker ${workerId} stops renewing its lease and claiming until they are, so that its jobs are rescued`,
        )
      }
      lapsing = true
      return Effect.race(wait(leaseMillis / 3), completer.recorded)
    }
    yield* JobLease.renew(workerId, leaseMillis)
    if (lapsing) yield* Effect.logWarning(`jobs: outcomes are recorded again; worker ${workerId} renewed its lease`)
    lapsing = false
    const now = yield* Clock.currentTimeMillis
    yield* fence.renewed(sentAt, now)
    yield* orphans(options, now)
    return wait(Math.min(leaseMillis / 3, sentAt + leaseMillis / 2 - now))
  }).pipe(
    Effect.catchCause((cause) =>
      Effect.as(Effect.logWarning("jobs: lease renewal failed", cause), wait(leaseMillis / 12)),
    ),
  )
  return Effect.flatten(beat).pipe(Effect.forever)
}

const rescuer = ({ leaseMillis }: MaintenanceOptions) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
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
  )

/**
 * One backend check: this worker's own backend gone stops its jobs; others' gone for the grace get
 * their jobs put back. Returns the millis until the next sighting comes of age, if one waits.
 */
const backendCheck = ({ workerId, liveness }: MaintenanceOptions) => {
  const seen = JobBackendRescue.sightings()
  const warn = ThrottledWarnings.make("1 minute")
  return Effect.gen(function* () {
    const found = yield* JobBackendRescue.gone()
    for (const own of found.filter((g) => g.worker === workerId)) yield* liveness.ownBackendGone(own)
    const now = yield* Clock.currentTimeMillis
    const dead = seen.update(
      now,
      found.filter((g) => g.worker !== workerId),
    )
    const rescued = yield* JobBackendRescue.rescue(dead)
    if (rescued.length > 0) {
      yield* Metric.update(JobMetrics.rescued, rescued.length)
      const workers = Array.from(new Set(rescued.map((r) => r.worker))).join(", ")
      yield* Effect.logWarning(
        `jobs: rescued ${rescued.length} jobs of workers whose backend is gone (${workers}): their process died or lost its connection`,
      )
    }
    return seen.nextDue(yield* Clock.currentTimeMillis)
  }).pipe(
    Effect.catchCause((cause) =>
      warn("backend", `jobs: looking for workers whose backend is gone failed: ${Cause.pretty(cause)}`).pipe(
        Effect.as(undefined),
      ),
    ),
  )
}

const backendChecks = (options: MaintenanceOptions) => {
  const check = backendCheck(options)
  const interval = Duration.toMillis(JobBackendRescue.checkInterval)
  return check.pipe(
    Effect.flatMap((due) => Effect.sleep(Duration.millis(Math.min(interval, due ?? interval)))),
    Effect.forever,
  )
}

const cleaner = (options: MaintenanceOptions) =>
  JobCleaner.clean(options.completedRetentionMillis, options.deadRetentionMillis).pipe(
    Effect.catchCause((cause) => Effect.logWarning("jobs: cleaner failed", cause)),
    Effect.repeat(Schedule.spaced(options.cleanerInterval)),
  )

/** The maintenance tasks, to fork in the worker's scope; each runs until interrupted. */
export const tasks = (options: MaintenanceOptions) => [
  heartbeat(options),
  rescuer(options),
  backendChecks(options),
  cleaner(options),
]
