/**
 * Commit-to-readable latency of the `post_commit` mode: from a producer seeing its append's commit
 * acknowledged to its events being in `event_log` for a reader, the extra hop the mode costs.
 *
 *   producer:  append returns (committed) ─────────────────────> committedAt[appendId]
 *   reader:    NOTIFY on event_log (one per sequencer batch) ──> read seq > cursor ──> readableAt[appendId]
 *
 * The reader is what a consumer does when woken: LISTEN on its own connection, then one query on
 * another. Both stamps are `performance.now()` in this process. A negative figure is an append
 * that was readable before its producer's fiber saw the acknowledgement.
 */
import { PgClient } from "@effect/sql-pg"
import { Effect, Queue } from "effect"
import { SqlClient } from "effect/sql"
import { type Distribution, distribution } from "../harness/Distribution.ts"

export interface CommitToReadable {
  /** Call as soon as the append's transaction committed. */
  readonly committed: (appendId: bigint) => void
  readonly distribution: () => Distribution
}

/** Starts the reader in the current scope, on the pool it is given (two connections). */
export const start = Effect.gen(function* () {
  const pg = yield* PgClient.PgClient
  const sql = yield* SqlClient.SqlClient
  const committedAt = new Map<bigint, number>()
  const readableAt = new Map<bigint, number>()
  const notifications = yield* pg.listen("event_log")
  const [head] = yield* sql<{ seq: bigint }>`SELECT value AS seq FROM event_seq`
  let cursor = head!.seq
  yield* Effect.gen(function* () {
    for (;;) {
      yield* Queue.take(notifications)
      yield* Queue.clear(notifications)
      const rows = yield* sql<{ seq: bigint; appendId: bigint }>`
        SELECT seq, append_id AS "appendId" FROM event_log WHERE seq > ${cursor} ORDER BY seq`
      const now = performance.now()
      for (const { seq, appendId } of rows) {
        if (!readableAt.has(appendId)) readableAt.set(appendId, now)
        cursor = seq
      }
    }
  }).pipe(Effect.orDie, Effect.forkScoped)
  return {
    committed: (appendId) => {
      committedAt.set(appendId, performance.now())
    },
    distribution: () => distribution([...committedAt].map(([id, at]) => (readableAt.get(id) ?? Number.NaN) - at)),
  } satisfies CommitToReadable
})
