/**
 * The end-to-end producer on a thread of its own: the host app that appends, with its own event
 * loop and pool, apart from the worker side as it is in production (a host app and a `bothy
 * worker` process). Only its timing crosses the thread boundary.
 *
 *   main: new Worker(this file, { workerData: ProducerInput })
 *   thread: pool connected ──"ready"──> main
 *   main ──{ t0 }──> thread: appends event i at t0 + i × interval (open loop, `Throughput.steady`)
 *   thread ──ProducerOutput──> main: when each append returned, how long it took, how late it started
 *
 * Times cross as absolute milliseconds (`performance.timeOrigin + performance.now()`): each thread
 * has its own time origin. The thread keeps its pool open until the scope ends, so that its
 * backends can be found in `pg_stat_activity` after the run and left out of the worker's count.
 */
import { parentPort, Worker, workerData } from "node:worker_threads"
import { PgClient } from "@effect/sql-pg"
import { Effect, Layer, Redacted } from "effect"
import { EventLog } from "../../src/log/EventLog.ts"
import { pgClientConfig } from "./BenchServer.ts"
import * as ThreadMessage from "./ThreadMessage.ts"
import * as Throughput from "./Throughput.ts"
import { eventAt } from "./WebhookSample.ts"

export interface ProducerInput {
  readonly host: string
  readonly port: number
  readonly user: string
  readonly password: string
  readonly database: string
  readonly connections: number
  readonly total: number
  readonly interval: number
  readonly subscriptions: number
}

/** Each event's stamps, by index: when its append returned, how long it took, how late its tick ran. */
export interface Stamps {
  readonly committedAt: Float64Array
  readonly appendMs: Float64Array
  readonly lateTick: Float64Array
}

/** Stamps for `total` events, none yet (NaN: an append that never returned stays so). */
export const unstamped = (total: number): Stamps => ({
  committedAt: new Float64Array(total).fill(Number.NaN),
  appendMs: new Float64Array(total).fill(Number.NaN),
  lateTick: new Float64Array(total).fill(Number.NaN),
})

export interface ProducerOutput {
  /** Absolute ms at which each append returned. */
  readonly committedAt: Float64Array
  readonly appendMs: Float64Array
  readonly lateTick: Float64Array
  /** CPU this thread used while producing (`process.threadCpuUsage`), user + system, in microseconds. */
  readonly cpuMicros?: number
}

/**
 * Appends event i at `t0 + i × interval` (this thread's `performance.now()`), open loop, and
 * stamps in this thread's clock when each append returned and how long it took: the loop the
 * thread runs, and the one the main thread runs itself with `producerThread` off.
 */
export const produce = (
  log: EventLog["Service"],
  options: { readonly total: number; readonly interval: number; readonly subscriptions: number; readonly t0: number },
  out: Stamps,
) =>
  Throughput.steady({ ...options, lateTick: out.lateTick }, (i, sent) =>
    log.append([eventAt(i, options.subscriptions)]).pipe(
      Effect.tap(() =>
        Effect.sync(() => {
          const now = performance.now()
          out.committedAt[i] = now
          out.appendMs[i] = now - sent
        }),
      ),
      Effect.asVoid,
      Effect.orDie,
    ),
  )

/** The connection part of `ProducerInput` for a server (the password as text: it crosses to the thread). */
export const connectionOf = (server: Parameters<typeof pgClientConfig>[0]) => {
  const { application_name: _, ...connection } = pgClientConfig(server)
  return connection
}

/** Runs the producer thread: resolves with its output once every append has returned. */
export const run = (input: ProducerInput) =>
  Effect.acquireRelease(
    Effect.sync(() => new Worker(new URL(import.meta.url), { workerData: input })),
    (worker) =>
      Effect.promise(async () => {
        // Its pool closes cleanly first; a thread that does not answer is stopped anyway.
        const closed = new Promise((resolve) => {
          worker.once("message", resolve)
          worker.once("exit", resolve)
          setTimeout(resolve, 5_000).unref()
        })
        worker.postMessage("close")
        await closed
        await worker.terminate()
      }),
  ).pipe(
    Effect.flatMap((worker) => {
      const message = <A>() => ThreadMessage.next<A>(worker)
      return Effect.succeed({
        ready: message<"ready">(),
        /** Starts at `t0` (this thread's `performance.now()`); the output's times are converted to it. */
        start: (t0: number) =>
          Effect.sync(() => worker.postMessage({ t0: performance.timeOrigin + t0 })).pipe(
            Effect.andThen(message<ProducerOutput>()),
            Effect.map((out) => {
              const committedAt = out.committedAt.map((at) => at - performance.timeOrigin)
              return { ...out, committedAt }
            }),
          ),
      })
    }),
    Effect.orDie,
  )

if (parentPort !== null && workerData !== null && typeof workerData === "object" && "total" in workerData) {
  const input = workerData as ProducerInput
  const port = parentPort
  const pool = PgClient.layer({
    host: input.host,
    port: input.port,
    username: input.user,
    password: Redacted.make(input.password),
    database: input.database,
    maxConnections: input.connections,
    minConnections: input.connections,
    applicationName: "bothy-bench-producer",
  })
  const program = Effect.gen(function* () {
    const log = yield* EventLog
    port.postMessage("ready")
    const t0Absolute = yield* Effect.callback<number>((resume) => {
      port.once("message", (m: { readonly t0: number }) => resume(Effect.succeed(m.t0)))
    })
    const out = unstamped(input.total)
    // The host app's CPU, so that a figure of the worker side can leave it out.
    const cpu0 = process.threadCpuUsage()
    yield* produce(log, { ...input, t0: t0Absolute - performance.timeOrigin }, out)
    const cpu = process.threadCpuUsage(cpu0)
    const committedAt = out.committedAt.map((at) => at + performance.timeOrigin)
    port.postMessage({ ...out, committedAt, cpuMicros: cpu.user + cpu.system } satisfies ProducerOutput)
    yield* Effect.callback<void>((resume) => {
      port.once("message", () => resume(Effect.void))
    })
  })
  Effect.runFork(
    program.pipe(
      Effect.provide(EventLog.layer.pipe(Layer.provide(pool))),
      Effect.ensuring(Effect.sync(() => port.postMessage("closed"))),
    ),
  )
}
