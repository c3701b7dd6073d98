/**
 * A worker process for sequencer tests: runs `Sequencer.layer` under `NodeRuntime.runMain`, the way
 * `bothy worker` runs it in `post_commit` mode, and prints its steps (`ACQUIRED <holder>`,
 * `BATCH <first> <last>`).
 *
 * env: DATABASE_URL, HOLDER, LEASE_MS, and BLOCK_IN_BATCH=1 to print `IN_BATCH <first> <last>` and
 * hang inside the first batch that numbered something, before its COMMIT (a holder that a test
 * then kills mid-batch).
 */
import { NodeRuntime } from "@effect/platform-node"
import { PgClient } from "@effect/sql-pg"
import { Cause, Effect, Exit, Layer, Redacted } from "effect"
import * as Sequencer from "../../src/log/Sequencer.ts"
import type { BatchResult } from "../../src/log/SequencerBatch.ts"

const env = (name: string) => process.env[name] ?? ""
const say = (line: string) => Effect.sync(() => process.stdout.write(`${line}\n`))

// Inside the batch's transaction, once it has numbered something: it holds its moved rows and the
// counter row until it ends.
const inBatch = (batch: BatchResult) =>
  batch.events === 0 ? Effect.void : Effect.andThen(say(`IN_BATCH ${batch.firstSeq} ${batch.lastSeq}`), Effect.never)

const Database = PgClient.layer({ url: Redacted.make(env("DATABASE_URL")), maxConnections: 2 })

const Main = Sequencer.layer({
  holder: env("HOLDER"),
  lease: `${Number(env("LEASE_MS"))} millis`,
  standbyInterval: "100 millis",
  pollInterval: "5 millis",
  batchSize: 50,
  onStep: (step) =>
    step._tag === "Acquired"
      ? say(`ACQUIRED ${step.holder}`)
      : step._tag === "Batch" && step.events > 0
        ? say(`BATCH ${step.firstSeq} ${step.lastSeq}`)
        : Effect.void,
  ...(env("BLOCK_IN_BATCH") === "1" ? { inBatch } : {}),
}).pipe(Layer.provide(Database))

NodeRuntime.runMain(Layer.launch(Main), {
  teardown: (exit, onExit) => onExit(Exit.isSuccess(exit) || Cause.hasInterruptsOnly(exit.cause) ? 0 : 1),
})
