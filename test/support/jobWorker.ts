/**
 * A job worker process for job runtime tests, under `NodeRuntime.runMain` like `bothy worker`.
 * Its one kind, `test.effect`, records each attempt in `job_effects` (the job's observable effect)
 * after an optional sleep; asked to, it fails its first attempt, or hangs in it for good.
 *
 * env: DATABASE_URL, CONCURRENCY, LEASE_MS (unset: the default lease), SHUTDOWN_TIMEOUT_MS. Prints `READY <worker id>`, and
 * `START <job id>` as each attempt begins.
 */
import { NodeRuntime } from "@effect/platform-node"
import { PgClient } from "@effect/sql-pg"
import { Cause, Duration, Effect, Exit, Layer, Redacted, Schema } from "effect"
import { SqlClient } from "effect/sql"
import * as JobKind from "../../src/jobs/JobKind.ts"
import * as JobWorker from "../../src/jobs/JobWorker.ts"
import { NotificationStream } from "../../src/platform/NotificationStream.ts"

const env = (name: string, fallback = "") => process.env[name] ?? fallback

const effectKind = JobKind.make({
  kind: "test.effect",
  args: Schema.Struct({
    n: Schema.Number,
    sleepMs: Schema.optional(Schema.Number),
    failFirst: Schema.optional(Schema.Boolean),
    hangFirst: Schema.optional(Schema.Boolean),
  }),
  retryDelay: () => Duration.millis(50),
  run: (args, job) =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      process.stdout.write(`START ${job.id}\n`)
      if (args.hangFirst === true && job.attempt === 1) return yield* Effect.never
      if (args.sleepMs !== undefined) yield* Effect.sleep(Duration.millis(args.sleepMs))
      yield* sql`
        INSERT INTO job_effects (job_id, n, attempt, worker) VALUES (${job.id}, ${args.n}, ${job.attempt}, ${process.pid})`
      if (args.failFirst === true && job.attempt === 1) return yield* Effect.fail("first attempt fails")
    }),
})

const Main = Layer.effectDiscard(
  Effect.flatMap(JobWorker.JobWorker, (w) => Effect.sync(() => process.stdout.write(`READY ${w.id}\n`))),
).pipe(
  Layer.provideMerge(
    JobWorker.layer({
      kinds: [effectKind],
      queues: { default: { concurrency: Number(env("CONCURRENCY", "10")) } },
      // Unset: the worker's default lease.
      ...(process.env.LEASE_MS === undefined ? {} : { lease: Duration.millis(Number(env("LEASE_MS"))) }),
      shutdownTimeout: Duration.millis(Number(env("SHUTDOWN_TIMEOUT_MS", "10000"))),
    }),
  ),
  Layer.provide(NotificationStream.layer()),
  Layer.provide(PgClient.layer({ url: Redacted.make(env("DATABASE_URL")), maxConnections: 4 })),
)

NodeRuntime.runMain(Layer.launch(Main), {
  teardown: (exit, onExit) => onExit(Exit.isSuccess(exit) || Cause.hasInterruptsOnly(exit.cause) ? 0 : 1),
})
