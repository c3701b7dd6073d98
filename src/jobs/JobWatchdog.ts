/**
 * Per-attempt timeouts: one watchdog that wakes every `tick` by the worker's Clock and interrupts
 * the attempts past their deadline, rather than a timer and two racing fibers per attempt (what
 * `Effect.timeout` costs: more than a short job). So an attempt runs up to one tick, a tenth of the
 * shortest timeout (at least 10 ms, at most 1 s), past its timeout.
 *
 * An attempt it interrupted is marked `timedOut` before the interruption, so that the executor
 * tells a timeout (a failed attempt) from shutdown (the job put back, its attempt not spent).
 */
import { Clock, Duration, Effect, type Fiber } from "effect"

/** An attempt being watched; the executor makes one per attempt and hands it to `add`. */
export interface Watch {
  readonly fiber: Fiber.Fiber<unknown, unknown>
  readonly deadline: number
  timedOut: boolean
}

export interface JobWatchdog {
  /** Starts watching; synchronous (the start of every attempt). */
  readonly add: (watch: Watch) => void
  /** Stops watching; synchronous (the end of every attempt). */
  readonly delete: (watch: Watch) => void
  /** Checks the deadlines every tick, forever; fork it in the worker's scope. */
  readonly run: Effect.Effect<never>
}

/** `timeoutsMillis`: every kind's timeout; the shortest sets the tick. */
export const make = (timeoutsMillis: ReadonlyArray<number>): JobWatchdog => {
  const watched = new Set<Watch>()
  const tick = Math.min(1000, Math.max(10, Math.min(...timeoutsMillis) / 10))
  const check = Effect.gen(function* () {
    const now = yield* Clock.currentTimeMillis
    for (const watch of watched) {
      if (!watch.timedOut && now >= watch.deadline) {
        watch.timedOut = true
        watch.fiber.interruptUnsafe()
      }
    }
  })
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
