/**
 * One sequencer batch of the in-place placement: the oldest committed appends still waiting in
 * `event_log` (with a provisional, negative seq) get the next seqs where they lie, in one
 * statement, so a batch is numbered and visible all at once or not at all. Only committed appends
 * are numbered: the statement's snapshot sees no other, so a transaction that may still be running
 * never has a seq, and one that rolls back never had one.
 *
 *   lease     the caller still holds the lease ── no row ──> nothing happens (leased = false)
 *   waiting   up to `limit` waiting events within the bounds (`UnsequencedBounds`), oldest first
 *   turn      the append lock (`appendLockKey`), only when something waits
 *   picked    those events and the rest of the last append among them (an append is numbered whole)
 *   head      event_seq moves by their count (its row lock orders this batch after any other), and
 *             keeps the bounds this batch used, for the next holder
 *   numbered  each picked event gets head + its rank, the epoch and the batch's time
 *   check     `event_log_numbering_check`: every picked event was numbered, or the statement fails
 *   wake      NOTIFY event_log, once per batch that numbered anything
 *
 * A provisional seq is `-(append id * appendWidth + position)`: unique with the event's time (the
 * primary key), waiting events sort by it (descending) in append order and position, and every seq
 * given is positive, so no reader's `seq > n` ever sees a waiting event.
 *
 * The statement's snapshot is taken before the lock is waited for. Another sequencer that numbered
 * the same events meanwhile (two holders overlapping in a lease handover) makes the UPDATE skip
 * them on its re-check while the count in `head` still holds them; `check` then fails the statement,
 * so nothing of it commits, and the next batch starts from a new snapshot.
 *
 * An event's time is the batch's, so it still grows with seq. The provisional time (its insert's)
 * is earlier, in the same hour leaf unless the hour turned between, when PostgreSQL moves the row.
 */
import { Effect, Schema } from "effect"
import { SqlClient } from "effect/sql"
import type { SqlError } from "effect/sql/SqlError"
import { isNoPartition, pgFailure } from "../platform/PgError.ts"
import { appendLockKey, appendWidth, channel, EventLogPartitionMissing } from "./EventLog.ts"
import type { BatchResult } from "./SequencerBatch.ts"
import type * as UnsequencedBounds from "./UnsequencedBounds.ts"

export interface InPlaceResult extends BatchResult {
  readonly marks: UnsequencedBounds.BatchMarks
}

const Row = Schema.Struct({
  leased: Schema.Boolean,
  appends: Schema.Int,
  events: Schema.Int,
  waited: Schema.Int,
  firstSeq: Schema.NullOr(Schema.BigInt),
  lastSeq: Schema.NullOr(Schema.BigInt),
  xmin: Schema.BigInt,
  xid: Schema.NullOr(Schema.BigInt),
  at: Schema.Date,
  lastId: Schema.BigInt,
  woke: Schema.Int,
})

const decodeRow = Schema.decodeUnknownEffect(Row)

/**
 * Numbers up to `limit` waiting events (whole appends) within `bounds` for `holder`, reading the
 * leaves up to `until`: no waiting event is later than the server's time now (the caller's estimate
 * of it, with a margin; undefined: every leaf ahead too).
 */
export const run = (
  holder: string,
  limit: number,
  bounds: UnsequencedBounds.Bounds,
  until?: Date,
): Effect.Effect<InPlaceResult, EventLogPartitionMissing | SqlError, SqlClient.SqlClient> =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const from = bounds.from === undefined ? "-infinity" : bounds.from.toISOString()
    const to = until === undefined ? "infinity" : until.toISOString()
    const below = -((bounds.after + 1n) * appendWidth) + 1n
    const within = (t: string) =>
      sql`${sql(t)}.seq < ${below} AND ${sql(t)}.occurred_at >= ${from}::timestamptz AND ${sql(t)}.occurred_at <= ${to}::timestamptz`
    // Unprepared: planned with its bounds, it prunes the hour leaves while planning.
    const [row] = yield* sql`
      WITH lease AS MATERIALIZED (
        SELECT FROM event_sequencer WHERE holder = ${holder} AND expires_at > clock_timestamp()
      ), waiting AS MATERIALIZED (
        SELECT seq FROM event_log AS w WHERE ${within("w")} AND EXISTS (SELECT FROM lease)
        ORDER BY seq DESC LIMIT ${limit}
      ), turn AS MATERIALIZED (
        SELECT pg_advisory_xact_lock(${appendLockKey}) FROM lease WHERE EXISTS (SELECT FROM waiting)
      ), picked AS MATERIALIZED (
        SELECT seq AS key, occurred_at AS at, row_number() OVER (ORDER BY seq DESC) AS n
        FROM event_log AS w
        WHERE ${within("w")} AND EXISTS (SELECT FROM turn)
          AND seq >= (SELECT -(((-min(seq)) / ${appendWidth}) * ${appendWidth} + ${appendWidth} - 1) FROM waiting)
      ), head AS (
        UPDATE event_seq
        SET value = value + (SELECT count(*) FROM picked), last_at = greatest(clock_timestamp(), last_at),
            unsequenced_from = ${from}::timestamptz, unsequenced_after = ${bounds.after}
        WHERE EXISTS (SELECT FROM picked)
        RETURNING value - (SELECT count(*) FROM picked) AS base, epoch, last_at AS at
      ), numbered AS (
        UPDATE event_log AS l SET seq = head.base + p.n, epoch = head.epoch, occurred_at = head.at
        FROM head, picked AS p
        WHERE l.seq = p.key AND l.occurred_at = p.at AND ${within("l")}
        RETURNING l.append_id
      ), wake AS MATERIALIZED (
        SELECT pg_notify(${channel}, '') FROM head
      )
      SELECT EXISTS (SELECT FROM lease) AS leased,
             (SELECT count(DISTINCT append_id) FROM numbered)::int AS appends,
             event_log_numbering_check((SELECT count(*) FROM picked), (SELECT count(*) FROM numbered))::int AS events,
             (SELECT count(*) FROM waiting)::int AS waited,
             (SELECT base + 1 FROM head) AS "firstSeq",
             (SELECT base + (SELECT count(*) FROM picked) FROM head) AS "lastSeq",
             pg_snapshot_xmin(pg_current_snapshot())::text::int8 AS xmin,
             pg_current_xact_id_if_assigned()::text::int8 AS xid,
             statement_timestamp() AS at,
             coalesce(pg_sequence_last_value('event_log_append_ids'), 0) AS "lastId",
             (SELECT count(*) FROM wake)::int AS woke`.unprepared.pipe(
      Effect.catchIf(isNoPartition, (e) => Effect.fail(new EventLogPartitionMissing({ detail: pgFailure(e).message }))),
    )
    const r = yield* decodeRow(row).pipe(Effect.orDie)
    return {
      leased: r.leased,
      appends: r.appends,
      events: r.events,
      firstSeq: r.firstSeq,
      lastSeq: r.lastSeq,
      marks: { full: r.waited >= limit, xmin: r.xmin, xid: r.xid ?? undefined, at: r.at, lastId: r.lastId },
    }
  }).pipe(Effect.withSpan("Sequencer.batch"))
