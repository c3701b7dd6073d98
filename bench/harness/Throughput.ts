/**
 * Measures a throughput: producers run flat out, and only what completes inside a fixed window
 * after a warm-up counts (connections opened, statements prepared, caches warm). Each case is
 * repeated and reported as the median, with every run kept, because the machines we run on are
 * shared and a single run can land on a noisy neighbour.
 *
 * Producers may be Effect fibers or plain promise loops (the `pg` driver baselines, which must not
 * pay for an Effect runtime they would not have), so they share a plain mutable `Tally` rather
 * than a `Ref`: they add what committed and stop at the next transaction boundary once `stopped`
 * is set.
 *
 * Timeline of one run:
 *
 *   start ── warm-up ──┬──────── window ────────┬── drain (in-flight transactions finish) ── end
 *                      events₀, t₀            events₁, t₁, stopped = true
 *
 *   rate = (events₁ − events₀) / (t₁ − t₀)
 */
import os from "node:os"
import { Clock, Config, Duration, Effect, Fiber, FiberSet } from "effect"

export interface Tally {
  /** Set once the window closes; a producer finishes its current transaction and returns. */
  readonly stopped: boolean
  /** Records events whose transaction committed. */
  readonly add: (events: number) => void
}

export interface Run {
  readonly eventsPerSecond: number
  /** Events committed inside the window. */
  readonly events: number
  /** Length of the window as measured, a little longer than asked when the event loop was busy. */
  readonly seconds: number
  /** Every event committed during the run: warm-up, window and drain. */
  readonly committed: number
  /** CPU this process used in the window, in cores (1 = one core flat out): the client's cost. */
  readonly clientCores: number
  /**
   * Share of all the machine's cores busy in the window (0..1), whoever used them: near 1, the
   * figure is CPU-bound on this machine, and other tenants' load shows up here.
   */
  readonly machineBusy: number
}

export interface Settings {
  readonly warmup: Duration.Duration
  readonly window: Duration.Duration
  readonly repeats: number
}

/** `BENCH_SECONDS` (window, default 3), `BENCH_WARMUP_SECONDS` (default 0.5), `BENCH_REPEATS` (default 3). */
export const settings = Config.all({
  window: Config.Number("BENCH_SECONDS").pipe(Config.withDefault(3)),
  warmup: Config.Number("BENCH_WARMUP_SECONDS").pipe(Config.withDefault(0.5)),
  repeats: Config.Int("BENCH_REPEATS").pipe(Config.withDefault(3)),
}).pipe(
  Config.map(
    (s): Settings => ({
      window: Duration.seconds(s.window),
      warmup: Duration.seconds(s.warmup),
      repeats: Math.max(1, s.repeats),
    }),
  ),
)

/** Runs `producers` through one warm-up and window; it must return once the tally is stopped. */
export const measure = <E, R>(settings: Settings, producers: (tally: Tally) => Effect.Effect<void, E, R>) =>
  Effect.gen(function* () {
    const tally = {
      stopped: false,
      committed: 0,
      add: (n: number) => {
        tally.committed += n
      },
    }
    const running = yield* Effect.forkChild(producers(tally))
    yield* Effect.sleep(settings.warmup)
    const t0 = yield* Clock.currentTimeNanos
    const events0 = tally.committed
    const cpu0 = cpuNow()
    yield* Effect.sleep(settings.window)
    const t1 = yield* Clock.currentTimeNanos
    const events1 = tally.committed
    const cpu1 = cpuNow()
    tally.stopped = true
    yield* Fiber.join(running)
    const seconds = Number(t1 - t0) / 1e9
    const events = events1 - events0
    const client = process.cpuUsage(cpu0.client)
    return {
      eventsPerSecond: events / seconds,
      events,
      seconds,
      committed: tally.committed,
      clientCores: round2((client.user + client.system) / 1e6 / seconds),
      machineBusy: round2(1 - (cpu1.idle - cpu0.idle) / (cpu1.total - cpu0.total)),
    } satisfies Run
  })

/**
 * Runs `effect` once, start to end, and reports how long it took with the same CPU figures as a
 * window: for work measured by completion (drain a backlog) rather than by a fixed window.
 */
export const timed = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.gen(function* () {
    const cpu0 = cpuNow()
    const t0 = performance.now()
    const value = yield* effect
    const seconds = (performance.now() - t0) / 1000
    const cpu1 = cpuNow()
    const client = process.cpuUsage(cpu0.client)
    return {
      value,
      seconds,
      clientCores: round2((client.user + client.system) / 1e6 / seconds),
      machineBusy: round2(1 - (cpu1.idle - cpu0.idle) / (cpu1.total - cpu0.total)),
    }
  })

const cpuNow = () => {
  let idle = 0
  let total = 0
  for (const { times } of os.cpus()) {
    idle += times.idle
    total += times.user + times.nice + times.sys + times.irq + times.idle
  }
  return { client: process.cpuUsage(), idle, total }
}

const round2 = (n: number) => Math.round(n * 100) / 100

export const median = (values: ReadonlyArray<number>) => {
  const sorted = [...values].sort((a, b) => a - b)
  const mid = Math.floor(sorted.length / 2)
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2
}

/**
 * Open-loop production at a steady rate: starts `produce(i, sent)` for i = 0 … total - 1 at
 * `t0 + i × interval` (`performance.now()`), without waiting for the ones before, records in
 * `lateTick` how late each start was, and ends when every one has finished.
 */
export const steady = <R>(
  options: { readonly total: number; readonly interval: number; readonly t0: number; readonly lateTick: Float64Array },
  produce: (i: number, sent: number) => Effect.Effect<void, never, R>,
) =>
  Effect.scoped(
    Effect.gen(function* () {
      const running = yield* FiberSet.make<void>()
      for (let i = 0; i < options.total; i++) {
        const due = options.t0 + i * options.interval
        const wait = due - performance.now()
        // Whole ms: Node truncates a fractional timeout, which would fire the tick early.
        if (wait > 0) yield* Effect.sleep(Duration.millis(Math.ceil(wait)))
        const sent = performance.now()
        options.lateTick[i] = sent - due
        yield* FiberSet.run(running, produce(i, sent))
      }
      yield* FiberSet.awaitEmpty(running)
    }),
  )
