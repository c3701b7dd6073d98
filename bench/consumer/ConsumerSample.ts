/**
 * The jobs the consumer benchmark's parts write, ours and the baselines alike: the same rows
 * with the same unique keys, so a figure compares the cost of writing them and nothing else.
 */
import { Effect, Layer } from "effect"
import { type JobInsert, Jobs } from "../../src/jobs/Jobs.ts"
import { EventLog } from "../../src/log/EventLog.ts"
import { BenchServer } from "../harness/BenchServer.ts"
import type * as ConsumerBaselines from "./ConsumerBaselines.ts"

export const consumer = "bench_rounds"
export const kind = "bench.deliver"
export const insertRows = 1000

// The jobs of Handoff.jobPerReceiver as the baseline writes them, unique key as ConsumerRound derives it.
export const rawFanOut =
  (receivers: number) => (events: ReadonlyArray<{ readonly seq: string; readonly traceParent: string | null }>) =>
    events.flatMap((e) =>
      Array.from(
        { length: receivers },
        (_, r): ConsumerBaselines.JobRow => ({
          kind,
          args: { seq: e.seq, receiver: `r${r}` },
          uniqueKey: `${consumer}:${e.seq}:r${r}`,
          traceParent: e.traceParent,
        }),
      ),
    )

// The Jobs.insert part's rows: call k's 1,000 jobs, fresh unique keys each call.
const traceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
export const insertBatch = (k: number): Array<ConsumerBaselines.JobRow> =>
  Array.from({ length: insertRows }, (_, i) => ({
    kind,
    args: { seq: String(k * insertRows + i), receiver: "r0" },
    uniqueKey: `insert:${k}:${i}`,
    traceParent,
  }))

export const asJobInsert = (row: ConsumerBaselines.JobRow): JobInsert => ({
  kind: row.kind,
  args: row.args,
  uniqueKey: row.uniqueKey,
  traceParent: row.traceParent,
})

/** Ours: the log and the job runtime on one connection, as one consumer round uses them. */
export const oursServices = Effect.gen(function* () {
  const server = yield* BenchServer
  return yield* Layer.build(Layer.mergeAll(EventLog.layer, Jobs.layer).pipe(Layer.provideMerge(server.pool(1))))
})
export type OursServices = Effect.Success<typeof oursServices>
