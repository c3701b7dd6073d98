/**
 * `postCommit` and `inPlace` in `append`: the same producers through `EventLog.layerPostCommit`
 * (appends wait in `event_log_pending`) or `EventLog.layerPostCommitInPlace` (in `event_log`), with the sequencer of that placement and the commit-to-readable reader on
 * connections of their own, as a worker and a consumer would be. After the window it times how
 * long the sequencer took to number what was still waiting.
 */
import { Effect, Layer } from "effect"
import { SqlClient } from "effect/sql"
import type { NewEvent } from "../../src/log/Event.ts"
import { EventLog } from "../../src/log/EventLog.ts"
import * as Sequencer from "../../src/log/Sequencer.ts"
import { NotificationStream } from "../../src/platform/NotificationStream.ts"
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
  // Bounded by a time before the run, planned with it, so the look prunes to today's leaves.
  const since = new Date(Date.now() - 3_600_000)
  const pending = sql<{ any: boolean }>`
    SELECT EXISTS (SELECT FROM event_log_pending)
        OR EXISTS (SELECT FROM event_log WHERE seq < 0 AND occurred_at >= ${since}) AS any`.unprepared
  while ((yield* pending)[0]?.any === true) yield* Effect.sleep("2 millis")
})

export type Placement = "in_place" | "pending"

export const postCommit = (
  server: BenchServer["Service"],
  settings: Throughput.Settings,
  producers: number,
  batches: ReadonlyArray<ReadonlyArray<NewEvent>>,
  placement: Placement,
) =>
  Effect.gen(function* () {
    const log = yield* EventLog
    // Woken by appends as a worker's is (`AppendWake`), and polling.
    yield* Layer.build(
      Sequencer.layer({ placement }).pipe(Layer.provide(NotificationStream.layer()), Layer.provide(server.pool(2))),
    )
    const readable = yield* CommitToReadable.start.pipe(Effect.provide(yield* Layer.build(server.pool(2))))
    yield* openEveryConnection(producers)
    const run = yield* Throughput.measure(settings, (tally) =>
      appendLoops(log, producers, batches, tally, (appended) => {
        if (appended._tag === "Unsequenced") readable.committed(appended.appendId)
      }),
    )
    const drained = yield* Throughput.timed(untilNothingPending)
    return { ...run, commitToReadableMs: readable.distribution(), drainSeconds: round3(drained.seconds) }
  }).pipe(
    Effect.scoped,
    Effect.provide(
      (placement === "in_place" ? EventLog.layerPostCommitInPlace : EventLog.layerPostCommit).pipe(
        Layer.provideMerge(server.pool(producers)),
      ),
    ),
  )
