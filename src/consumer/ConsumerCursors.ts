/**
 * Consumer cursors moved or held from outside a round.
 *
 * Every cursor at once, for `bothy restore finalize`: after a restore (see docs/retention.md),
 * every cursor goes to the head of the restored log. The events up to that head were committed
 * before the backup; a consumer that had not read them by then most likely did afterwards, in the
 * history the restore undid, and receivers may have got their work. Reading them again would
 * create that work a second time, under new ids. The work pending at the restore point itself is
 * kept, in its own tables.
 *
 * The cursors are locked without waiting: a cursor locked by someone else means a consumer round is
 * running right now, which after a restore must not be, so the caller hears of it at once.
 *
 * Also one cursor's lock (`lock`), for a consumer's own changes that must fall between two rounds
 * (a webhook subscription re-enabled from a seq the `webhooks` consumer has passed).
 */
import { Effect, Schema } from "effect"
import { SqlClient } from "effect/sql"
import * as EventLog from "../log/EventLog.ts"
import { pgFailure } from "../platform/PgError.ts"

export class ConsumerRoundRunning extends Schema.TaggedError<ConsumerRoundRunning>()("ConsumerRoundRunning", {
  detail: Schema.String,
}) {
  override get message() {
    return `a consumer round holds its cursor (a worker is running): ${this.detail}`
  }
}

export interface CursorMove {
  readonly name: string
  readonly from: bigint
  readonly to: bigint
}

/** Sets every cursor to `head` inside the caller's transaction; returns each one's move, by name. */
export const moveAllTo = Effect.fn("ConsumerCursors.moveAllTo")(function* (head: bigint) {
  const sql = yield* SqlClient.SqlClient
  const cursors = yield* sql<{ name: string; from: bigint }>`
    SELECT name, last_seq AS "from" FROM event_consumer_cursors ORDER BY name FOR UPDATE NOWAIT`.pipe(
    Effect.catchIf(
      (e) => pgFailure(e).code === "55P03",
      (e) => Effect.fail(new ConsumerRoundRunning({ detail: pgFailure(e).message })),
    ),
  )
  yield* sql`
    UPDATE event_consumer_cursors
    SET last_seq = ${head}, last_at = greatest(last_at, ${EventLog.headAt(sql)}), updated_at = clock_timestamp()
    WHERE last_seq <> ${head}`
  return cursors.map((c): CursorMove => ({ name: c.name, from: c.from, to: head }))
})

/**
 * Locks the cursor of `name` inside the caller's transaction, waiting for a round that holds it, and
 * returns its `last_seq`: until the caller commits, no round of that consumer runs, and the ones
 * that ran before have committed (`undefined`: no such consumer).
 *
 * It writes the row (unchanged) rather than only locking it: a one-statement round whose snapshot
 * was taken before the caller committed, and that locks the row after, then finds a newer version
 * than its snapshot's and writes nothing (`StatementRound`), instead of acting on a snapshot
 * without the caller's change.
 */
/**
 * Every cursor with the log's head, read in one snapshot, by name: its last seq and update, the
 * lag, and the cursor's and the head's times as text (exact, for `EventLog.between`).
 */
export const withHead = (sql: SqlClient.SqlClient) =>
  sql<{
    readonly name: string
    readonly lastSeq: bigint
    readonly head: bigint
    readonly lag: number
    readonly updatedAt: Date
    readonly afterAt: string
    readonly headAt: string
  }>`
    SELECT c.name, c.last_seq AS "lastSeq", h.seq AS head, (h.seq - c.last_seq)::float8 AS lag,
           c.updated_at AS "updatedAt", c.last_at::text AS "afterAt", h.at::text AS "headAt"
    FROM event_consumer_cursors AS c
    CROSS JOIN ${EventLog.head(sql)} AS h
    ORDER BY c.name`

export const lock = Effect.fn("ConsumerCursors.lock")(function* (name: string) {
  const sql = yield* SqlClient.SqlClient
  const [row] = yield* sql<{ lastSeq: bigint }>`
    UPDATE event_consumer_cursors SET last_seq = last_seq WHERE name = ${name} RETURNING last_seq AS "lastSeq"`
  return row?.lastSeq
})
