/**
 * `postCommit` in `append`: the same producers through `EventLog.layerPostCommit`, with the
 * sequencer and the commit-to-readable reader on connections of their own, as a worker and a
 * consumer would be. After the window it times how long the sequencer took to number what was
 * still pending.
 */
import { Effect, Layer } from "effect"
import { SqlClient } from "effect/sql"
import type { NewEvent } from "../../src/log/Event.ts"
import { EventLog } from "../../src/log/EventLog.ts"
import * as Sequencer from "../../src/log/Sequencer.ts"
import type { BenchServer } from "../harness/BenchServer.ts"
import type { Distribution } from "../harness/Distribution.ts"
import { round3 } from "../harness/Figures.ts"
import * as Throughput from "../harness/Throughput.ts"
import * as CommitToReadable from "./CommitToReadable.ts"
import { appendLoops, openEveryConnection } from "./Counter.ts"

export interface Readable {
  /** Commit acknowledged to readable in event_log, per append, ms. */
  readonly commitToReadableMs: Distribution
  /** After the window: until the sequencer had numbered everything still pending. */
  readonly drainSeconds: number
}

/** Until the sequencer has numbered every committed append (no sequencer: never). */
const untilNothingPending = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const pending = sql<{ any: boolean }>`SELECT EXISTS (SELECT FROM event_log_pending) AS any`
  while ((yield* pending)[0]?.any === true) yield* Effect.sleep("2 millis")
})

export const postCommit = (
  server: BenchServer["Service"],
  settings: Throughput.Settings,
  producers: number,
  batches: ReadonlyArray<ReadonlyArray<NewEvent>>,
) =>
  Effect.gen(function* () {
    const log = yield* EventLog
    yield* Layer.build(Sequencer.layer().pipe(Layer.provide(server.pool(2))))
    const readable = yield* CommitToReadable.start.pipe(Effect.provide(yield* Layer.build(server.pool(2))))
    yield* openEveryConnection(producers)
    const run = yield* Throughput.measure(settings, (tally) =>
      appendLoops(log, producers, batches, tally, (appended) => {
        if (appended._tag === "Unsequenced") readable.committed(appended.appendId)
      }),
    )
    const drained = yield* Throughput.timed(untilNothingPending)
    return { ...run, commitToReadableMs: readable.distribution(), drainSeconds: round3(drained.seconds) }
  }).pipe(Effect.scoped, Effect.provide(EventLog.layerPostCommit.pipe(Layer.provideMerge(server.pool(producers)))))
