/**
 * What every `append` run writes, and the state each starts from: 64 batches drawn in turn from
 * 256 sample events, an empty log with the counter at 0 and nothing left for a checkpoint.
 */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"
import type { NewEvent } from "../../src/log/Event.ts"
import { eventAt } from "../harness/SampleEvent.ts"
import type * as AppendBaselines from "./AppendBaselines.ts"

export const sample: ReadonlyArray<NewEvent> = Array.from({ length: 256 }, (_, i) => eventAt(i))
export const payloadBytes = Math.round(
  sample.reduce((sum, e) => sum + Buffer.byteLength(JSON.stringify(e.payload)), 0) / sample.length,
)

/** 64 batches of `size` events drawn from the sample in turn; producers cycle through them. */
export const batchesOf = (size: number) =>
  Array.from({ length: 64 }, (_, b) => Array.from({ length: size }, (_, j) => sample[(b * size + j) % sample.length]!))

// The baselines write the same trace_parent column ours fills from the current span.
const traceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
export const asRow = (e: NewEvent): AppendBaselines.Row => [
  e.space,
  e.type,
  e.actor,
  JSON.stringify(e.payload),
  traceParent,
]

export const reset = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`TRUNCATE event_log, event_log_pending`
  yield* sql`UPDATE event_seq SET value = 0`
  yield* sql`UPDATE event_sequencer SET holder = NULL, expires_at = '-infinity'`
  yield* sql.unsafe("VACUUM event_seq") // the counter row is updated per transaction; start each run unbloated
  yield* sql.unsafe("CHECKPOINT") // so no run pays for the previous run's dirty pages or full-page writes
})
