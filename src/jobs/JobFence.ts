/**
 * A worker never runs a job past its own lease. It keeps, by its `Clock`, the time until which its
 * lease is surely live: the time read just before sending a renewal that then succeeded, plus the
 * lease. The database sets `expires_at = clock_timestamp() + lease` when that statement runs,
 * which is later, so this bound is never past the database's expiry, however the two clocks are
 * set (only their rates must agree over one lease).
 *
 *   live ──(watchdog tick) now >= live until - margin──> fenced: every running attempt is
 *     interrupted (Release, its attempt not spent: recorded if the completer can, else left to the
 *     rescuer), nothing is claimed or started; one error line, `bothy.jobs.fenced`
 *   fenced ──a renewal succeeds, live until - margin ahead again──> live: one warning line, the
 *     fetchers wake and claim
 *
 * The margin is a sixth of the lease, twice the watchdog's longest tick (`tickMillis`), so that
 * the tick that sees the fence come interrupts the attempts before the lease can lapse. Whatever
 * keeps renewals from succeeding fences: the database away, the renewal waiting on a lock, or the
 * heartbeat holding back because outcomes are stuck (`JobMaintenance`). Without the fence, a job
 * whose worker lost its lease ran on beside its rescued run elsewhere (the chaos run found a
 * webhook drain doing so, and a receiver seeing deliveries out of order).
 *
 * The same fence guards rescue by backend (`JobBackendRescue`): once this worker's recorded backend
 * may be gone, other workers put its running jobs back after a short grace, so it stops them at once
 * (`backendLost`: the watchdog interrupts them now, not at its next tick) and claims nothing until
 * it has recorded a new backend (`backendRecorded`).
 *
 *   live ──backendLost──> fenced (backend): attempts interrupted at once; one error line, `bothy.jobs.fenced`
 *   fenced (backend) ──backendRecorded, lease not due──> live: one warning line, the fetchers wake
 */
import { Duration, Effect, Metric } from "effect"
import * as JobMetrics from "./JobMetrics.ts"

export interface JobFence {
  /** How long before the bound the worker stops its attempts. */
  readonly marginMillis: number
  /** The longest the watchdog may wait between checks: half the margin. */
  readonly tickMillis: number
  /** True while the worker must run and claim nothing: fenced, or about to be at `now`. */
  readonly fenced: (now: number) => boolean
  /**
   * A renewal sent at `sentAt` (read before sending) succeeded. Ends a fence when the bound is
   * ahead again by more than the margin at `now` (a renewal that took longer leaves it fenced).
   */
  readonly renewed: (sentAt: number, now: number) => Effect.Effect<void>
  /** The watchdog's tick: enters the fence when it is due (logs, counts); true while fenced. */
  readonly check: (now: number, running: number) => Effect.Effect<boolean>
  /** Runs `wake` whenever a fence ends (a fetcher registers its wake-up). */
  readonly onLive: (wake: Effect.Effect<void>) => void
  /** The backend this worker recorded may be gone (`why`): fence now, and stop the running attempts now. */
  readonly backendLost: (now: number, why: string) => Effect.Effect<void>
  /** A new backend (or none) is recorded: the backend fence ends. */
  readonly backendRecorded: (now: number) => Effect.Effect<void>
  /** True while fenced because of the backend (the reason a stopped attempt records). */
  readonly lostBackend: () => boolean
  /** Runs `stop` when a fence must stop the attempts at once (the watchdog registers its check). */
  readonly onStop: (stop: Effect.Effect<void>) => void
}

const seconds = (millis: number) => Duration.format(Duration.millis(Math.round(millis / 100) * 100))

/** `sentAt`: the clock reading before the worker's first renewal, which succeeded. */
export const make = (options: { readonly workerId: string; readonly leaseMillis: number; readonly sentAt: number }) => {
  const { workerId, leaseMillis } = options
  const marginMillis = leaseMillis / 6
  let lastSent = options.sentAt
  let liveUntil = options.sentAt + leaseMillis
  let fencedSince: number | undefined
  let backendLostSince: number | undefined
  const wakes: Array<Effect.Effect<void>> = []
  const stops: Array<Effect.Effect<void>> = []
  const due = (now: number) => now >= liveUntil - marginMillis
  const wakeAll = Effect.suspend(() => Effect.forEach(wakes, (wake) => wake, { discard: true }))

  const fence: JobFence = {
    marginMillis,
    tickMillis: marginMillis / 2,
    fenced: (now) => fencedSince !== undefined || due(now) || backendLostSince !== undefined,
    renewed: (sentAt, now) =>
      Effect.suspend(() => {
        // A fetch may have been refused since the bound came near, before any tick saw it.
        const refused = fencedSince !== undefined || due(now)
        lastSent = Math.max(lastSent, sentAt)
        liveUntil = lastSent + leaseMillis
        if (!refused || due(now)) return Effect.void
        const since = fencedSince
        fencedSince = undefined
        const wake = backendLostSince === undefined ? wakeAll : Effect.void
        if (since === undefined) return wake
        const then =
          backendLostSince === undefined ? "it claims jobs again" : "it claims jobs again once it records a backend"
        return Effect.logWarning(
          `jobs: worker ${workerId} renewed its lease again, ${seconds(now - since)} after it stopped its jobs; ${then}`,
        ).pipe(Effect.andThen(wake))
      }),
    check: (now, running) =>
      Effect.suspend(() => {
        if (fencedSince !== undefined) return Effect.succeed(true)
        if (!due(now)) return Effect.succeed(backendLostSince !== undefined)
        fencedSince = now
        return Metric.update(JobMetrics.fenced, 1).pipe(
          Effect.andThen(
            Effect.logError(
              `jobs: worker ${workerId} has not renewed its lease for ${seconds(now - lastSent)} (lease ${seconds(leaseMillis)}): it stops its ${running} running jobs and claims none until a renewal succeeds, so that no job runs past the lease beside its rescued run`,
            ),
          ),
          Effect.as(true),
        )
      }),
    onLive: (wake) => {
      wakes.push(wake)
    },
    backendLost: (now, why) =>
      Effect.suspend(() => {
        if (backendLostSince !== undefined) return Effect.void
        backendLostSince = now
        return Metric.update(JobMetrics.fenced, 1).pipe(
          Effect.andThen(
            Effect.logError(
              `jobs: worker ${workerId} ${why}: it stops its running jobs and claims none until it has recorded a new backend, as other workers soon put back the jobs of a worker whose backend is gone`,
            ),
          ),
          Effect.andThen(Effect.forEach(stops, (stop) => stop, { discard: true })),
        )
      }),
    backendRecorded: (now) =>
      Effect.suspend(() => {
        const since = backendLostSince
        if (since === undefined) return Effect.void
        backendLostSince = undefined
        const leaseFenced = fencedSince !== undefined || due(now)
        return Effect.logWarning(
          `jobs: worker ${workerId} recorded its new backend, ${seconds(now - since)} after it lost the last one${leaseFenced ? "" : "; it claims jobs again"}`,
        ).pipe(Effect.andThen(leaseFenced ? Effect.void : wakeAll))
      }),
    lostBackend: () => backendLostSince !== undefined,
    onStop: (stop) => {
      stops.push(stop)
    },
  }
  return fence
}
