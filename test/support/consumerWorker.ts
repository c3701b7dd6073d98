/**
 * A worker process for consumer tests: runs one consumer under `NodeRuntime.runMain`, the way
 * `bothy worker` runs the real ones, and prints its round outcomes as JSON when it stops.
 *
 * env: DATABASE_URL, CONSUMER, BATCH_SIZE, RECEIVERS, and BLOCK_IN_FANOUT=1 to print `IN_FANOUT`
 * and hang inside the first fan-out (a round that a test then kills mid-way).
 */
import { NodeRuntime } from "@effect/platform-node"
import { PgClient } from "@effect/sql-pg"
import { Cause, Effect, Exit, Layer, Metric, Redacted } from "effect"
import * as Consumer from "../../src/consumer/Consumer.ts"
import * as JobMetrics from "../../src/jobs/JobMetrics.ts"
import { Jobs } from "../../src/jobs/Jobs.ts"
import { EventLog } from "../../src/log/EventLog.ts"
import { NotificationStream } from "../../src/platform/NotificationStream.ts"
import { fanOutJobs } from "./TestConsumer.ts"

const env = (name: string) => process.env[name] ?? ""
const counts: Record<string, number> = {}

const ConsumerLive = Consumer.layer({
  name: env("CONSUMER"),
  batchSize: Number(env("BATCH_SIZE")),
  pollInterval: "1 second",
  onLoss: () => Effect.void,
  fanOut: (events) =>
    env("BLOCK_IN_FANOUT") === "1"
      ? Effect.sync(() => process.stdout.write(`IN_FANOUT ${events[0].seq}\n`)).pipe(Effect.andThen(Effect.never))
      : Effect.succeed(fanOutJobs(events, Number(env("RECEIVERS")))),
  onRound: (outcome) =>
    Effect.sync(() => {
      counts[outcome._tag] = (counts[outcome._tag] ?? 0) + 1
      if (counts[outcome._tag] === 1) process.stdout.write(`FIRST ${outcome._tag}\n`)
    }),
})

const report = Effect.gen(function* () {
  const suppressed = (yield* Metric.value(JobMetrics.insertSuppressed)).count
  process.stdout.write(`${JSON.stringify({ counts, suppressed })}\n`)
})

const Main = Layer.effectDiscard(Effect.addFinalizer(() => report)).pipe(
  Layer.provideMerge(ConsumerLive),
  Layer.provide(NotificationStream.layer()),
  Layer.provide(Layer.mergeAll(EventLog.layer, Jobs.layer)),
  Layer.provide(PgClient.layer({ url: Redacted.make(env("DATABASE_URL")), maxConnections: 4 })),
)

NodeRuntime.runMain(Layer.launch(Main), {
  teardown: (exit, onExit) => onExit(Exit.isSuccess(exit) || Cause.hasInterruptsOnly(exit.cause) ? 0 : 1),
})
