/**
 * One sequencer batch: the oldest committed appends move from `event_log_pending` into `event_log`
 * and get the next seqs, in one statement, so a batch is numbered and visible all at once or not
 * at all. Only committed appends can be moved: the statement's snapshot sees no other, so a
 * transaction that may still be running never has a seq, and one that rolls back never had one.
 *
 *   lease   the caller still holds the lease ── no row ──> nothing happens (leased = false)
 *   turn    the append lock (`appendLockKey`), only when something is pending
 *   picked  up to `limit` pending appends, oldest id first
 *   moved   deleted from event_log_pending, returning their events (the DELETE's row lock is the
 *           only one: no FOR UPDATE before it, which would write a lock record per row)
 *   ev      the events in (append id, position in the append) order, numbered 1..n
 *   head    event_seq moves by n (its row lock orders this batch after any other), occurred_at
 *   ins     the events into event_log at head + 1..n
 *   wake    NOTIFY event_log, once per batch that numbered anything
 *
 * Order: batches follow each other (the row lock); within one, appends go by id, which each
 * append takes when it runs. With the append last in its transaction (as `EventLog` asks), an
 * append made after another's commit has a higher id and so a higher seq: the log respects
 * "happened after". Two appends whose transactions overlapped may come in either order, which
 * nobody could tell apart before they were numbered. `occurred_at` is the batch's time, so it still
 * grows with seq and each day's partition holds a range of seqs, as retention expects.
 *
 * Its snapshot is taken before the locks are waited for; that is safe, as in the counter mode's
 * append: the `event_seq` update re-reads the row it waited for, and a pending row that another
 * batch moved meanwhile is skipped by the DELETE's re-check, so `ev` holds only what this batch
 * really deleted.
 */
import { Effect, Schema } from "effect"
import { SqlClient } from "effect/sql"
import type { SqlError } from "effect/sql/SqlError"
import { isNoPartition, pgFailure } from "../platform/PgError.ts"
import { appendLockKey, channel, EventLogPartitionMissing } from "./EventLog.ts"

export interface BatchResult {
  /** False when the caller no longer holds the lease: the batch did nothing. */
  readonly leased: boolean
  readonly appends: number
  readonly events: number
  /** The seqs given, when `events > 0`. */
  readonly firstSeq: bigint | null
  readonly lastSeq: bigint | null
}

const Row = Schema.Struct({
  leased: Schema.Boolean,
  appends: Schema.Int,
  events: Schema.Int,
  firstSeq: Schema.NullOr(Schema.BigInt),
  lastSeq: Schema.NullOr(Schema.BigInt),
  woke: Schema.Int,
})

const decodeRow = Schema.decodeUnknownEffect(Row)

/** Numbers up to `limit` committed appends for `holder` (see the module header). */
export const run = (
  holder: string,
  limit: number,
): Effect.Effect<BatchResult, EventLogPartitionMissing | SqlError, SqlClient.SqlClient> =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const [row] = yield* sql`
      WITH lease AS MATERIALIZED (
        SELECT FROM event_sequencer WHERE holder = ${holder} AND expires_at > clock_timestamp()
      ), turn AS MATERIALIZED (
        SELECT pg_advisory_xact_lock(${appendLockKey}) FROM lease
        WHERE EXISTS (SELECT FROM event_log_pending)
      ), picked AS MATERIALIZED (
        SELECT p.id FROM event_log_pending AS p
        WHERE EXISTS (SELECT FROM turn)
        ORDER BY p.id LIMIT ${limit}
      ), moved AS (
        DELETE FROM event_log_pending AS p USING picked WHERE p.id = picked.id RETURNING p.id, p.events
      ), ev AS MATERIALIZED (
        SELECT m.id, e.s, e.t, e.a, e.p, e.tp, row_number() OVER (ORDER BY m.id, e.ord) AS n
        FROM moved AS m,
          ROWS FROM (jsonb_to_recordset(m.events) AS (s text, t text, a text, p text, tp text))
          WITH ORDINALITY AS e(s, t, a, p, tp, ord)
      ), head AS (
        UPDATE event_seq SET value = value + (SELECT count(*) FROM ev), last_at = greatest(clock_timestamp(), last_at)
        WHERE EXISTS (SELECT FROM ev)
        RETURNING value - (SELECT count(*) FROM ev) AS base, epoch, last_at AS at
      ), ins AS (
        INSERT INTO event_log (seq, epoch, occurred_at, space_id, type, actor, payload, trace_parent, append_id)
        SELECT head.base + ev.n, head.epoch, head.at, ev.s, ev.t, ev.a, ev.p::jsonb, ev.tp, ev.id
        FROM head, ev
      ), wake AS MATERIALIZED (
        SELECT pg_notify(${channel}, '') FROM head
      )
      SELECT EXISTS (SELECT FROM lease) AS leased, (SELECT count(*) FROM moved)::int AS appends,
             (SELECT count(*) FROM ev)::int AS events, (SELECT base + 1 FROM head) AS "firstSeq",
             (SELECT base + (SELECT count(*) FROM ev) FROM head) AS "lastSeq", (SELECT count(*) FROM wake)::int AS woke`.pipe(
      Effect.catchIf(isNoPartition, (e) => Effect.fail(new EventLogPartitionMissing({ detail: pgFailure(e).message }))),
    )
    const { leased, appends, events, firstSeq, lastSeq } = yield* decodeRow(row).pipe(Effect.orDie)
    return { leased, appends, events, firstSeq, lastSeq }
  }).pipe(Effect.withSpan("Sequencer.batch"))
