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
}

const seconds = (millis: number) => Duration.format(Duration.millis(Math.round(millis / 100) * 100))

/** `sentAt`: the clock reading before the worker's first renewal, which succeeded. */
export const make = (options: { readonly workerId: string; readonly leaseMillis: number; readonly sentAt: number }) => {
  const { workerId, leaseMillis } = options
  const marginMillis = leaseMillis / 6
  let lastSent = options.sentAt
  let liveUntil = options.sentAt + leaseMillis
  let fencedSince: number | undefined
  const wakes: Array<Effect.Effect<void>> = []
  const due = (now: number) => now >= liveUntil - marginMillis

  const fence: JobFence = {
    marginMillis,
    tickMillis: marginMillis / 2,
    fenced: (now) => fencedSince !== undefined || due(now),
    renewed: (sentAt, now) =>
      Effect.suspend(() => {
        // A fetch may have been refused since the bound came near, before any tick saw it.
        const refused = fence.fenced(now)
        lastSent = Math.max(lastSent, sentAt)
        liveUntil = lastSent + leaseMillis
        if (!refused || due(now)) return Effect.void
        const since = fencedSince
        fencedSince = undefined
        const wake = Effect.forEach(wakes, (wake) => wake, { discard: true })
        if (since === undefined) return wake
        return Effect.logWarning(
          `jobs: worker ${workerId} renewed its lease again, ${seconds(now - since)} after it stopped its jobs; it claims jobs again`,
        ).pipe(Effect.andThen(wake))
      }),
    check: (now, running) =>
      Effect.suspend(() => {
        if (fencedSince !== undefined) return Effect.succeed(true)
        if (!due(now)) return Effect.succeed(false)
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
  }
  return fence
}
