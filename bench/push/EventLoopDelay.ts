/**
 * How late this thread's event loop ran its timers while something was measured: a worker side
 * whose loop is busy (CPU-bound on one thread) delays every stamp and every I/O callback by as
 * much, which shows up as time in whatever phase happened to be waiting. Node's histogram samples
 * the delay every 10 ms.
 */
import { monitorEventLoopDelay } from "node:perf_hooks"
import { Effect } from "effect"
import { round3 } from "../harness/Figures.ts"

/** Starts a histogram for the scope; `read` gives p50/p99/max in ms so far. */
export const monitor = Effect.acquireRelease(
  Effect.sync(() => {
    const histogram = monitorEventLoopDelay({ resolution: 10 })
    histogram.enable()
    return histogram
  }),
  (histogram) => Effect.sync(() => histogram.disable()),
).pipe(
  Effect.map((histogram) => ({
    read: () => ({
      p50: round3(histogram.percentile(50) / 1e6),
      p99: round3(histogram.percentile(99) / 1e6),
      max: round3(histogram.max / 1e6),
      mean: round3(histogram.mean / 1e6),
    }),
  })),
)
