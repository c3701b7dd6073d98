/**
 * bothy's job runtime under the `JobRuntime` contract: jobs go in through `Jobs.insert` on a pool
 * of their own (the application's), and a worker is one `JobWorker.layer` with one queue,
 * `NotificationStream.layer()` and a fresh, lazily opened pool of `workerConnections` (as
 * graphile-worker's is), built in the bench process the way `bothy worker` builds it, with every
 * option at its default but the queue's `prefetch`.
 */
import { Context, Effect, Layer, Schema } from "effect"
import { SqlClient } from "effect/sql"
import * as JobKind from "../../src/jobs/JobKind.ts"
import { Jobs } from "../../src/jobs/Jobs.ts"
import * as JobWorker from "../../src/jobs/JobWorker.ts"
import { NotificationStream } from "../../src/platform/NotificationStream.ts"
import { BenchServer } from "../harness/BenchServer.ts"
import { type JobRuntime, noopKind } from "./JobRuntime.ts"

/** The worker's pool, as graphile-worker's default `maxPoolSize`. */
export const workerConnections = 10

const noop = (onRun: (id: number) => void) =>
  JobKind.make({
    kind: noopKind,
    args: Schema.Struct({ i: Schema.Number }),
    run: (args) => Effect.sync(() => onRun(args.i)),
  })

/** Opens the inserting pool in the current scope; `prefetch` 0 (the default) claims only up to the free slots. */
export const make = (prefetch = 0) =>
  Effect.gen(function* () {
    const server = yield* BenchServer
    const context = yield* Layer.build(Jobs.layer.pipe(Layer.provideMerge(server.pool(4))))
    const jobs = Context.get(context, Jobs)
    const sql = Context.get(context, SqlClient.SqlClient)

    return {
      name: prefetch === 0 ? "ours" : `ours-prefetch-${prefetch}`,
      description: `bothy JobWorker.layer (poll 1 s, ${prefetch === 0 ? "claims up to the free slots (the default)" : `prefetch ${prefetch}: claims up to the free slots plus ${prefetch} held jobs, refetching at half`}, completer batches whatever outcomes wait; a completed job's row is deleted, claims commit without waiting for their WAL flush, outcomes wait for theirs), one queue; NotificationStream.layer(); a pool of ${workerConnections} connections. Inserts through Jobs.insert on a separate pool of 4.`,
      reset: Effect.andThen(sql`TRUNCATE jobs`, sql`DELETE FROM job_workers`),
      analyze: sql.unsafe("VACUUM ANALYZE jobs"),
      enqueueMany: (ids) => jobs.insert(ids.map((i) => ({ kind: noopKind, args: { i } }))),
      enqueueOne: (i) => jobs.insert([{ kind: noopKind, args: { i } }]),
      start: (concurrency, onRun) =>
        Layer.build(
          JobWorker.layer({ kinds: [noop(onRun)], queues: { default: { concurrency, prefetch } } }).pipe(
            Layer.provide(NotificationStream.layer()),
            Layer.provide(server.pool(workerConnections, { lazy: true })),
          ),
        ).pipe(Effect.asVoid),
      unfinished: Effect.map(
        sql<{ n: number }>`SELECT count(*)::int AS n FROM jobs WHERE finalized_at IS NULL`,
        (rows) => rows[0]?.n ?? 0,
      ),
    } satisfies JobRuntime
  })
