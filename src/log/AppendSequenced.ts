/**
 * What an append returns, and `sequenced`, which turns a `post_commit` append into its seqs: it
 * looks, in one statement, whether the append still waits for the sequencer (in
 * `event_log_pending`, or in `event_log` with provisional seqs when sequenced in place) or is
 * numbered (the sequencer numbers an append whole, atomically, so a committed append is one or the
 * other), and waits with a doubling pause until it is numbered; an append that is neither never
 * committed.
 */
import { Duration, Effect, Schema } from "effect"
import type { SqlClient } from "effect/sql"

/** Where an append landed in the log: its events hold `firstSeq..lastSeq`, in the batch's order. */
export interface Sequenced {
  readonly _tag: "Sequenced"
  readonly firstSeq: bigint
  readonly lastSeq: bigint
  readonly epoch: number
  readonly occurredAt: Date
}

/**
 * An append in `post_commit` mode: committed (or not) with the producer's transaction, numbered
 * later by the sequencer. `sequenced` turns it into its seqs once they are given.
 */
export interface Unsequenced {
  readonly _tag: "Unsequenced"
  /** The append's id (its row in `event_log_pending`, or in place), later `event_log.append_id` of each of its events. */
  readonly appendId: bigint
  readonly events: number
}

/** What an append returns: its seqs in `counter` mode, its id in `post_commit` mode. */
export type Appended = Sequenced | Unsequenced

/**
 * `sequenced` found an append neither waiting for the sequencer nor in the log: its transaction
 * rolled back, or has not committed yet (`sequenced` belongs after the commit).
 */
export class AppendNotCommitted extends Schema.TaggedError<AppendNotCommitted>()("AppendNotCommitted", {
  appendId: Schema.BigInt,
}) {
  override get message() {
    return `append ${this.appendId} is neither pending nor in event_log: its transaction rolled back or has not committed yet`
  }
}

/** Longest pause between two looks of `sequenced`: it starts at a millisecond and doubles. */
const sequencedPollCap = Duration.millis(100)

export const sequencedWith = (sql: SqlClient.SqlClient) =>
  Effect.fn("EventLog.sequenced")(function* (appended: Appended) {
    if (appended._tag === "Sequenced") return appended
    const { appendId, events } = appended
    // One statement, one snapshot: the sequencer numbers an append whole, and moves one from
    // event_log_pending atomically, so a committed append is waiting or numbered, never both.
    const look = sql<{
      pending: boolean
      first: bigint | null
      last: bigint | null
      n: number
      epoch: number | null
      at: Date | null
    }>`
      SELECT EXISTS (SELECT FROM event_log_pending WHERE id = ${appendId}) OR bool_or(seq < 0) AS pending,
             min(seq) AS first, max(seq) AS last, count(*)::int AS n, min(epoch) AS epoch, min(occurred_at) AS at
      FROM event_log WHERE append_id = ${appendId}`
    for (let pause = 1; ; pause = Math.min(pause * 2, Duration.toMillis(sequencedPollCap))) {
      const [row] = yield* look
      if (row !== undefined && row.pending !== true && row.n === events && row.first !== null && row.last !== null) {
        return {
          _tag: "Sequenced",
          firstSeq: row.first,
          lastSeq: row.last,
          epoch: row.epoch!,
          occurredAt: row.at!,
        } satisfies Sequenced
      }
      if (row?.pending !== true) return yield* new AppendNotCommitted({ appendId })
      yield* Effect.sleep(Duration.millis(pause))
    }
  })
