/**
 * graphile-worker under the `JobRuntime` contract, on the benchmark's server in its own schema
 * (`graphile_worker`, installed by its migrations when the first runtime is made).
 *
 * Jobs go in through `WorkerUtils` (`addJobs`, one `add_jobs` call, for a batch; `addJob` for one)
 * on a pool of their own; a worker is `run()` with a `taskList` and a connection string, so it
 * makes its own pool (`maxPoolSize`, default 10) the way an application starts it. Two presets:
 *
 * - `defaults`: only `concurrentJobs` set; each of its workers fetches one job per query and
 *   completes it with one statement.
 * - `best`: what graphile-worker's performance page uses for its figures: a local queue of 500
 *   (`localQueue.size`: one query locks up to 500 jobs that the pool hands out) and batched
 *   completion (`completeJobBatchDelay: 0`, `failJobBatchDelay: 0`).
 *
 * Its logger is quiet below warnings: by default it logs a line per completed job, and the
 * benchmark measures the queue, not the console (its own perf test sets `NO_LOG_SUCCESS`).
 */
import { Effect, Redacted, Schema } from "effect"
import { type AddJobsJobSpec, Logger, makeWorkerUtils, run, type TaskList, type WorkerUtils } from "graphile-worker"
import { BenchServer } from "../harness/BenchServer.ts"
import { type JobRuntime, noopKind } from "./JobRuntime.ts"

export type Preset = "defaults" | "best"

export class GraphileFailed extends Schema.TaggedError<GraphileFailed>()("GraphileFailed", {
  operation: Schema.String,
  cause: Schema.Defect(),
}) {
  override get message() {
    return `graphile-worker ${this.operation} failed: ${String(this.cause)}`
  }
}

const attempt = <A>(operation: string, promise: () => Promise<A>) =>
  Effect.tryPromise({ try: promise, catch: (cause) => new GraphileFailed({ operation, cause }) })

const quiet = new Logger(() => (level, message) => {
  if (level === "error" || level === "warning") console.error(`graphile-worker ${level}: ${message}`)
})

/** The worker options of each preset, beyond `concurrentJobs`; `{}` is graphile-worker's defaults. */
export const presets: Record<Preset, GraphileConfig.WorkerOptions> = {
  defaults: {},
  best: { localQueue: { size: 500 }, completeJobBatchDelay: 0, failJobBatchDelay: 0 },
}

/** Opens the inserting utils (and migrates graphile-worker's schema) in the current scope. */
export const make = (preset: Preset) =>
  Effect.gen(function* () {
    const server = yield* BenchServer
    const connectionString =
      `postgres://${encodeURIComponent(server.user)}:${encodeURIComponent(Redacted.value(server.password))}` +
      `@${server.host}:${server.port}/${encodeURIComponent(server.database)}`
    const utils: WorkerUtils = yield* Effect.acquireRelease(
      attempt("makeWorkerUtils", () => makeWorkerUtils({ connectionString, maxPoolSize: 4, logger: quiet })),
      (u) => Effect.promise(async () => u.release()),
    )
    const query = (operation: string, text: string) =>
      attempt(operation, () => utils.withPgClient((client) => client.query<{ n: number }>(text)))

    return {
      name: `graphile-${preset}`,
      description:
        preset === "defaults"
          ? "graphile-worker run() with its defaults (poll 2 s, no local queue, one completion per job, maxPoolSize 10) and concurrentJobs; addJobs / addJob on a separate pool of 4"
          : "graphile-worker run() with its performance page's batching: localQueue.size 500, completeJobBatchDelay 0, failJobBatchDelay 0; otherwise defaults (poll 2 s, maxPoolSize 10); addJobs / addJob on a separate pool of 4",
      reset: query("reset", "TRUNCATE graphile_worker._private_jobs, graphile_worker._private_job_queues"),
      analyze: query("analyze", "VACUUM ANALYZE graphile_worker._private_jobs"),
      enqueueMany: (ids) =>
        attempt("addJobs", () =>
          utils.addJobs(ids.map((i): AddJobsJobSpec => ({ identifier: noopKind, payload: { i } }))),
        ),
      enqueueOne: (i) => attempt("addJob", () => utils.addJob(noopKind, { i })),
      start: (concurrency, onRun) => {
        const taskList: TaskList = {
          [noopKind]: (payload) => {
            onRun((payload as { readonly i: number }).i)
          },
        }
        return Effect.acquireRelease(
          attempt("run", () =>
            run({
              taskList,
              parsedCronItems: [],
              noHandleSignals: true,
              preset: { worker: { ...presets[preset], connectionString, concurrentJobs: concurrency, logger: quiet } },
            }),
          ),
          (runner) => Effect.promise(() => runner.stop()),
        ).pipe(Effect.asVoid)
      },
      unfinished: Effect.map(
        query("count", "SELECT count(*)::int AS n FROM graphile_worker._private_jobs"),
        (r) => r.rows[0]?.n ?? 0,
      ),
    } satisfies JobRuntime
  })
