/**
 * Latency under a steady load: an open-loop pacer that submits request k at t₀ + k / rate whether
 * or not earlier ones have returned (a closed loop would slow down with the system under test and
 * hide its stalls: coordinated omission), and the percentiles of what it measured.
 *
 *   t₀      t₀+1/r    t₀+2/r    …            submit k: stamp, fork, never wait for it
 *   │─────────│─────────│────────
 */
import { Duration, Effect, Fiber } from "effect"
import { round3 } from "../harness/Figures.ts"

export interface Percentiles {
  readonly n: number
  readonly p50: number
  readonly p95: number
  readonly p99: number
  readonly max: number
  readonly mean: number
}

/** Nearest-rank percentiles of `samples` (milliseconds), rounded to microseconds. */
export const percentiles = (samples: ReadonlyArray<number>): Percentiles => {
  const sorted = [...samples].sort((a, b) => a - b)
  const at = (q: number) => sorted[Math.max(0, Math.ceil(q * sorted.length) - 1)] ?? Number.NaN
  return {
    n: sorted.length,
    p50: round3(at(0.5)),
    p95: round3(at(0.95)),
    p99: round3(at(0.99)),
    max: round3(sorted[sorted.length - 1] ?? Number.NaN),
    mean: round3(sorted.reduce((s, x) => s + x, 0) / Math.max(1, sorted.length)),
  }
}

export interface Paced {
  /** How late, in ms, the pacer submitted requests behind their schedule (event-loop lag). */
  readonly lagMs: Percentiles
  /** How long each submitted effect took to return, in ms. */
  readonly returnedMs: Percentiles
}

/**
 * Submits `submit(0)`, `submit(1)`, … `count - 1` at `perSecond`, each in its own fiber, and waits
 * for all of them. `onSubmit(k)` is called right before request k starts, where a caller stamps it.
 */
export const openLoop = <E, R>(
  count: number,
  perSecond: number,
  onSubmit: (k: number) => void,
  submit: (k: number) => Effect.Effect<unknown, E, R>,
) =>
  Effect.gen(function* () {
    const interval = 1000 / perSecond
    const lag: Array<number> = []
    const returned: Array<number> = []
    const fibers: Array<Fiber.Fiber<unknown, E>> = []
    const t0 = performance.now()
    for (let k = 0; k < count; k++) {
      const due = t0 + k * interval
      const wait = due - performance.now()
      if (wait > 0) yield* Effect.sleep(Duration.millis(wait))
      const submitted = performance.now()
      lag.push(submitted - due)
      onSubmit(k)
      fibers.push(
        yield* Effect.forkChild(
          Effect.tap(submit(k), () => Effect.sync(() => returned.push(performance.now() - submitted))),
        ),
      )
    }
    yield* Fiber.joinAll(fibers)
    return { lagMs: percentiles(lag), returnedMs: percentiles(returned) } satisfies Paced
  })
