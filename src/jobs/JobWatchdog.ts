/**
 * Per-attempt timeouts and the lease fence: one watchdog that wakes every `tick` by the worker's
 * Clock and interrupts the attempts past their deadline, and every running attempt while the worker
 * is fenced (`JobFence`: its lease may lapse soon), rather than a timer and two racing fibers per
 * attempt (what `Effect.timeout` costs: more than a short job). So an attempt runs up to one tick
 * past its timeout; the tick is a tenth of the shortest timeout and at most half the fence's
 * margin (at least 10 ms unless the lease asks for less, at most 1 s).
 *
 * An attempt it interrupted is marked with why (`stoppedBy`) before the interruption, so that the
 * executor tells a timeout (a failed attempt) from the fence and from shutdown (the job put back,
 * its attempt not spent). A timeout wins over the fence: that attempt failed either way. A fence
 * for a lost backend (`JobFence.backendLost`) runs the check at once rather than at the next tick.
 */
import { Clock, Duration, Effect, type Fiber } from "effect"
import type { JobFence } from "./JobFence.ts"

/** An attempt being watched; the executor makes one per attempt and hands it to `add`. */
export interface Watch {
  readonly fiber: Fiber.Fiber<unknown, unknown>
  readonly deadline: number
  stoppedBy: "timeout" | "fence" | "backend" | undefined
}

export interface JobWatchdog {
  /** Starts watching; synchronous (the start of every attempt). */
  readonly add: (watch: Watch) => void
  /** Stops watching; synchronous (the end of every attempt). */
  readonly delete: (watch: Watch) => void
  /** Checks the deadlines and the fence every tick, forever; fork it in the worker's scope. */
  readonly run: Effect.Effect<never>
}

const stop = (watch: Watch, why: NonNullable<Watch["stoppedBy"]>) => {
  watch.stoppedBy = why
  watch.fiber.interruptUnsafe()
}

/** `timeoutsMillis`: every kind's timeout; the shortest sets the tick, unless the fence needs a shorter one. */
export const make = (timeoutsMillis: ReadonlyArray<number>, fence: JobFence): JobWatchdog => {
  const watched = new Set<Watch>()
  const tick = Math.min(1000, Math.max(10, Math.min(...timeoutsMillis) / 10), fence.tickMillis)
  const check = Effect.gen(function* () {
    const now = yield* Clock.currentTimeMillis
    const fenced = yield* fence.check(now, watched.size)
    for (const watch of watched) {
      if (watch.stoppedBy !== undefined) continue
      if (now >= watch.deadline) stop(watch, "timeout")
      else if (fenced) stop(watch, fence.lostBackend() ? "backend" : "fence")
    }
  })
  // A lost backend cannot wait for the next tick: other workers put the jobs back soon.
  fence.onStop(check)
  return {
    add: (watch) => {
      watched.add(watch)
    },
    delete: (watch) => {
      watched.delete(watch)
    },
    run: check.pipe(Effect.delay(Duration.millis(tick)), Effect.forever),
  }
}
