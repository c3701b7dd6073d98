/**
 * Commit-to-readable latency of the `post_commit` mode: from a producer seeing its append's commit
 * acknowledged to its events being in `event_log` for a reader, the extra hop the mode costs.
 *
 *   producer:  append returns (committed) ─────────────────────> committedAt[appendId]
 *   reader:    NOTIFY on event_log (one per sequencer batch) ──> read seq > cursor ──> readableAt[appendId]
 *
 * The reader is what a consumer does when woken: LISTEN on its own connection, then the head and
 * the rows up to it on another. Both stamps are `performance.now()` in this process. A negative figure is an append
 * that was readable before its producer's fiber saw the acknowledgement.
 */
import { PgClient } from "@effect/sql-pg"
import { Effect, Queue } from "effect"
import { SqlClient } from "effect/sql"
import { between, type Position } from "../../src/log/EventLog.ts"
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
  // As a consumer reads (`EventLog.readFrom`): the head first, then the rows after the cursor up to
  // it, bounded by both times and planned with them, so PostgreSQL sets up only the leaves between
  // them. Unbounded, the read planned over every leaf of the log: 30 ms a read under the cases' load.
  const headNow = sql<{ seq: bigint; at: string }>`SELECT value AS seq, last_at::text AS at FROM event_seq`
  let cursor: Position = (yield* headNow)[0]!
  yield* Effect.gen(function* () {
    for (;;) {
      yield* Queue.take(notifications)
      yield* Queue.clear(notifications)
      const [head] = yield* headNow
      if (head === undefined || head.seq <= cursor.seq) continue
      const rows = yield* sql<{ seq: bigint; appendId: bigint }>`
        SELECT seq, append_id AS "appendId" FROM event_log WHERE ${between(sql, cursor, head)} ORDER BY seq`.unprepared
      const now = performance.now()
      for (const { appendId } of rows) if (!readableAt.has(appendId)) readableAt.set(appendId, now)
      cursor = head
    }
  }).pipe(Effect.orDie, Effect.forkScoped)
  return {
    committed: (appendId) => {
      committedAt.set(appendId, performance.now())
    },
    distribution: () => distribution([...committedAt].map(([id, at]) => (readableAt.get(id) ?? Number.NaN) - at)),
  } satisfies CommitToReadable
})
