/**
 * A job runtime as `bench/jobs/jobs.ts` drives it: bothy's (`BothyJobRuntime.ts`) and graphile-worker
 * (`GraphileJobRuntime.ts`) behind one contract, so every case runs the same code against each.
 *
 * Every job is the same no-op of one kind whose args carry a number `i`; its run function calls
 * the `onRun(i)` the worker was started with and returns at once, so what is measured is the
 * runtime (claim, dispatch, completion), not the work.
 */
import type { Effect, Scope } from "effect"

export interface JobRuntime {
  /** As the results name it, e.g. "ours", "graphile-defaults". */
  readonly name: string
  /** How it is configured, for the results' baseline description. */
  readonly description: string
  /** Removes every job, so that each case starts from an empty table. */
  readonly reset: Effect.Effect<void, unknown>
  /** Refreshes the planner's statistics of the job table (after a bulk insert). */
  readonly analyze: Effect.Effect<void, unknown>
  /** Enqueues one job per id in a single call of the runtime's bulk API. */
  readonly enqueueMany: (ids: ReadonlyArray<number>) => Effect.Effect<void, unknown>
  /** Enqueues one job in its own transaction. */
  readonly enqueueOne: (id: number) => Effect.Effect<void, unknown>
  /**
   * Starts a worker at concurrency `concurrency`, with its own connection pool, whose run function
   * calls `onRun`; it runs until the scope closes, which shuts it down gracefully.
   */
  readonly start: (concurrency: number, onRun: (id: number) => void) => Effect.Effect<void, unknown, Scope.Scope>
  /** Jobs not yet recorded as finished in the database. */
  readonly unfinished: Effect.Effect<number, unknown>
}

/** The no-op job's kind (bothy) or task identifier (graphile-worker). */
export const noopKind = "bench_noop"
