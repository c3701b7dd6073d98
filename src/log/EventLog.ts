/**
 * The event log: append inside the producer's transaction, read in seq order, read the head.
 *
 * Invariant: gapless and commit-ordered. A reader that sees seq n sees every seq below it, and a
 * rollback leaves no hole. `event_log` holds numbered events only, in both sequencing modes
 * (`log.sequencing`), so every reader is the same in both:
 *
 * - `counter` (`EventLog.layer`): appending locks the one `event_seq` row, so commits that append
 *   are serialized; the numbers are the append's own, and a rollback gives them back. The price is
 *   that the row lock is held from the counter update to the end of COMMIT, so that window holds
 *   exactly one statement: the counter update, the insert and the NOTIFY run together, and nothing
 *   but COMMIT follows. `appendAfter` makes that order structural.
 * - `post_commit` (`EventLog.layerPostCommit`): an append is one INSERT into `event_log_pending`
 *   that takes no shared lock, so producers commit in parallel; it returns the append's id, and
 *   `Sequencer` numbers committed appends afterwards, in batches, with the same counter update
 *   (see there). `sequenced` waits for the numbers. No NOTIFY in the producer's transaction:
 *   PostgreSQL serializes the commits of transactions that NOTIFY (a lock held through the
 *   commit), which would undo the point; the sequencer NOTIFYs once per batch instead, and is
 *   woken by a NOTIFY sent after the producer's commit, in a statement of its own (`AppendWake`).
 *   `layerPostCommitInPlace` is the same mode with the appends waiting in `event_log` itself
 *   (`SequencerBatchInPlace`), measured and not kept (docs/decisions.md).
 *
 * Appenders queue on a transaction-scoped advisory lock taken just before the counter update, so
 * the row is free whenever one gets to it: the lock manager hands the advisory lock to the next
 * waiter alone, where waiters on the row itself were all woken at every commit to race for it
 * again (at 32 producers that halved the throughput). Anything else that updates `event_seq` must
 * take the same lock first (`appendLockKey`); the sequencer does.
 *
 * `occurred_at` never decreases with `seq`: an append's time is taken under the same lock, as
 * `greatest(clock_timestamp(), event_seq.last_at)`, so a clock that steps back cannot break it. A
 * reader after a seq therefore knows a lower bound of the times it will read (a cursor keeps one,
 * `last_at`), and bounding `occurred_at` by it keeps the read to the day partitions that can hold
 * the rows, however many days the log keeps.
 *
 * The log knows no consumer: the NOTIFY on `event_log` carries no payload and is only a wake-up.
 */
import { Context, Effect, Layer, Option, Schema } from "effect"
import { SqlClient, type Statement } from "effect/sql"
import type { SqlError } from "effect/sql/SqlError"
import type { LogSequencing } from "../platform/BothyConfig.ts"
import { isNoPartition, pgFailure } from "../platform/PgError.ts"
import * as TraceParent from "../platform/TraceParent.ts"
import { type Appended, type AppendNotCommitted, type Sequenced, sequencedWith } from "./AppendSequenced.ts"
import * as AppendWake from "./AppendWake.ts"
import { Event, InvalidEvent, type NewEvent, validateBatch } from "./Event.ts"
import { between } from "./EventLogReads.ts"
import * as EventTypeValidation from "./EventTypeValidation.ts"

export { type Appended, AppendNotCommitted, type Sequenced, type Unsequenced } from "./AppendSequenced.ts"
// The fragments other parts compose (the head, time-bounded reads) are `EventLogReads`'; they are
// part of this module's face, as the log's reads always were.
export * from "./EventLogReads.ts"

/**
 * The NOTIFY channel on which a commit that numbered events wakes the log's readers (no payload:
 * a wake-up, never the data). Readers subscribe to it by this name.
 */
export const channel = "event_log"

/**
 * The NOTIFY channel on which `post_commit` appends wake the sequencer once they committed (no
 * payload), sent after the commit in a statement of its own (`AppendWake`).
 */
export const appendedChannel = "event_log_appended"

/** The transaction-scoped advisory lock appenders queue on (see the module header). */
export const appendLockKey = 7_270_100_001n

/**
 * Positions an append's events may take in a provisional seq, `-(append id * appendWidth +
 * position)` (see `SequencerBatchInPlace`): an append holds fewer events than this.
 */
export const appendWidth = 1_048_576n

/** The head of the log: the highest committed seq (0 when empty) and the current epoch. */
export interface Head {
  readonly seq: bigint
  readonly epoch: number
}

export class EventLogPartitionMissing extends Schema.TaggedError<EventLogPartitionMissing>()(
  "EventLogPartitionMissing",
  { detail: Schema.String },
) {
  override get message() {
    return `event_log has no partition for the current time; run event_log_ensure_partitions (the bothy worker does this hourly): ${this.detail}`
  }
}

export type AppendError = InvalidEvent | EventLogPartitionMissing | SqlError

/** A defect: without its one `event_seq` row the log cannot number anything. */
const noCounterRow = Effect.die("event_seq has no row: the migrations were not applied")

const decodeEvents = Schema.decodeUnknownEffect(Schema.Array(Event))

/** The batch as the JSON both modes' statements read with `jsonb_to_recordset`. */
const rowsOf = Effect.fnUntraced(function* (events: ReadonlyArray<NewEvent>) {
  const valid = yield* Effect.fromResult(validateBatch(events))
  const parent = yield* TraceParent.current
  const rows = JSON.stringify(
    valid.map(([e, payload]) => ({ s: e.space, t: e.type, a: e.actor, p: payload, tp: parent })),
  )
  return { rows, n: valid.length, valid: valid.map(([e]) => e) }
})

/**
 * Runs `statement` with the catalog's version the batch was checked against; `undefined` from it
 * means its guard saw another version (or no counter row): the catalog is read again and the
 * batch checked again, and a second `undefined` at an unchanged version is the missing row.
 */
const checked = <A>(
  catalog: EventTypeValidation.CatalogCheck,
  events: ReadonlyArray<NewEvent>,
  statement: (version: bigint) => Effect.Effect<A | undefined, AppendError>,
): Effect.Effect<A, AppendError> =>
  Effect.gen(function* () {
    let used: bigint | undefined
    for (;;) {
      const version = yield* catalog.check(events)
      if (version === used) return yield* noCounterRow
      const done = yield* statement(version)
      if (done !== undefined) return done
      used = version
      yield* catalog.reload
    }
  })

const appendWith = (sql: SqlClient.SqlClient, catalog: EventTypeValidation.CatalogCheck) =>
  Effect.fn("EventLog.append")(function* (events: ReadonlyArray<NewEvent>) {
    const { rows, n, valid } = yield* rowsOf(events)
    // One statement: counter update (takes the lock), insert, NOTIFY. Only COMMIT follows.
    // The catalog's guard runs before the lock, so it adds nothing to the serialized phase.
    const statement = (version: bigint) =>
      sql<{ base: bigint; epoch: number; at: Date }>`
      WITH turn AS MATERIALIZED (
        SELECT pg_advisory_xact_lock(${appendLockKey}) WHERE ${catalog.guard(version)}
      ), head AS (
        UPDATE event_seq SET value = value + ${n}, last_at = greatest(clock_timestamp(), last_at) FROM turn
        RETURNING value - ${n} AS base, epoch, last_at AS at
      ), ins AS (
        INSERT INTO event_log (seq, epoch, occurred_at, space_id, type, actor, payload, trace_parent)
        SELECT head.base + e.ord, head.epoch, head.at, e.s, e.t, e.a, e.p::jsonb, e.tp
        FROM head, ROWS FROM (jsonb_to_recordset(${rows}::jsonb) AS (s text, t text, a text, p text, tp text))
          WITH ORDINALITY AS e(s, t, a, p, tp, ord)
      )
      SELECT head.base, head.epoch, head.at FROM head, (SELECT pg_notify(${channel}, '')) AS wake`.pipe(
        Effect.map((rows) => rows[0]),
        Effect.catchIf(isNoPartition, (e) =>
          Effect.fail(new EventLogPartitionMissing({ detail: pgFailure(e).message })),
        ),
      )
    const row = yield* checked(catalog, valid, statement)
    return {
      _tag: "Sequenced",
      firstSeq: row.base + 1n,
      lastSeq: row.base + BigInt(n),
      epoch: row.epoch,
      occurredAt: row.at,
    } satisfies Appended as Appended
  })

// One row, no shared lock: producers' commits do not wait for each other (nor NOTIFY: see the header).
const appendPendingWith = (sql: SqlClient.SqlClient, catalog: EventTypeValidation.CatalogCheck) =>
  Effect.fn("EventLog.append")(function* (events: ReadonlyArray<NewEvent>) {
    const { rows, n, valid } = yield* rowsOf(events)
    const row = yield* checked(catalog, valid, (version) =>
      Effect.map(
        sql<{ id: bigint }>`
          INSERT INTO event_log_pending (events) SELECT ${rows}::jsonb WHERE ${catalog.guard(version)} RETURNING id`,
        (rows) => rows[0],
      ),
    )
    return { _tag: "Unsequenced", appendId: row.id, events: n } satisfies Appended as Appended
  })

/**
 * In place: the events go into `event_log` itself with provisional seqs (see
 * `SequencerBatchInPlace`), one statement and no shared lock. The transaction's xid is taken
 * first, then the append's id, then each event's time: `UnsequencedBounds` rests on that order.
 */
const appendInPlaceWith = (sql: SqlClient.SqlClient, catalog: EventTypeValidation.CatalogCheck) =>
  Effect.fn("EventLog.append")(function* (events: ReadonlyArray<NewEvent>) {
    const { rows, n, valid } = yield* rowsOf(events)
    if (BigInt(n) >= appendWidth) {
      return yield* new InvalidEvent({
        index: Number(appendWidth) - 1,
        reason: "BatchTooLarge",
        detail: `an append holds at most ${appendWidth - 1n} events; this one has ${n}`,
      })
    }
    const statement = (version: bigint) =>
      sql<{ id: bigint }>`
      WITH xact AS MATERIALIZED (
        SELECT pg_current_xact_id() WHERE ${catalog.guard(version)}
      ), a AS MATERIALIZED (
        SELECT nextval('event_log_append_ids') AS id FROM xact
      ), ins AS (
        INSERT INTO event_log (seq, epoch, occurred_at, space_id, type, actor, payload, trace_parent, append_id)
        SELECT -(a.id * ${appendWidth} + e.ord), 0, clock_timestamp(), e.s, e.t, e.a, e.p::jsonb, e.tp, a.id
        FROM a, ROWS FROM (jsonb_to_recordset(${rows}::jsonb) AS (s text, t text, a text, p text, tp text))
          WITH ORDINALITY AS e(s, t, a, p, tp, ord)
      )
      SELECT id FROM a`.pipe(
        Effect.map((rows) => rows[0]),
        Effect.catchIf(isNoPartition, (e) =>
          Effect.fail(new EventLogPartitionMissing({ detail: pgFailure(e).message })),
        ),
      )
    const row = yield* checked(catalog, valid, statement)
    return { _tag: "Unsequenced", appendId: row.id, events: n } satisfies Appended as Appended
  })

const readWith = (sql: SqlClient.SqlClient) =>
  Effect.fn("EventLog.read")(function* (afterSeq: bigint, limit: number) {
    const rows = yield* sql`
      SELECT seq, epoch, occurred_at AS "occurredAt", space_id AS space, type, actor, payload,
             trace_parent AS "traceParent"
      FROM event_log WHERE seq > ${afterSeq} ORDER BY seq LIMIT ${limit}`
    return yield* decodeEvents(rows).pipe(Effect.orDie)
  })

/**
 * Two statements, so that the read's bounds are parameters: PostgreSQL prunes the hour leaves with
 * parameters when it plans, but with values of another relation (the cursor row, the head) only
 * while the statement runs, after it has planned and set up every leaf (with 30 days of leaves,
 * that was most of a round). The read is bounded by the first statement's head as well as its
 * time, so what it returns is what a one-statement read would have: the log is gapless and every
 * seq up to that head had committed, so a later snapshot sees them all, unless retention removed
 * them (then they are lost either way). The read runs unprepared: planned each time with its
 * bounds, it prunes the leaves while planning and locks only those; a prepared statement's generic
 * plan would lock every leaf, and the read's time would grow with the days kept.
 */
const readFromWith = (sql: SqlClient.SqlClient) =>
  Effect.fn("EventLog.readFrom")(function* (from: Statement.Fragment, limit: number) {
    // The times as text: a JS Date drops the microseconds, and the head's own event would then
    // fall after an upper bound rounded down.
    const [position] = yield* sql<{ after: bigint; afterAt: string; head: bigint; headEpoch: number; headAt: string }>`
      WITH c AS MATERIALIZED (${from})
      SELECT c.last_seq AS after, c.last_at::text AS "afterAt", s.value AS head, s.epoch AS "headEpoch",
             s.last_at::text AS "headAt"
      FROM c CROSS JOIN event_seq AS s`
    if (position === undefined) return Option.none()
    const { after, afterAt, head, headEpoch, headAt } = position
    const rows =
      head > after
        ? yield* sql`
            SELECT seq, epoch, occurred_at AS "occurredAt", space_id AS space, type, actor, payload,
                   trace_parent AS "traceParent"
            FROM event_log WHERE ${between(sql, { seq: after, at: afterAt }, { seq: head, at: headAt })}
            ORDER BY seq LIMIT ${limit}`.unprepared
        : []
    const events = yield* decodeEvents(rows).pipe(Effect.orDie)
    return Option.some({ after, head: { seq: head, epoch: headEpoch }, headAt, events })
  })

export class EventLog extends Context.Service<
  EventLog,
  {
    /**
     * Appends events as the last statement of the current transaction (or on its own when there
     * is none). Call it last: anything after it in the same transaction holds the commit lock
     * that every producer waits on. `appendAfter` enforces that.
     */
    readonly append: (events: ReadonlyArray<NewEvent>) => Effect.Effect<Appended, AppendError>
    /**
     * The seqs of an append: at once in `counter` mode; in `post_commit` mode once the sequencer
     * has numbered it (polling, from a millisecond apart up to 100 ms). Call it after the append's
     * transaction committed: inside it, it would wait forever. `AppendNotCommitted` when the
     * append is nowhere (rolled back, or not committed yet).
     */
    readonly sequenced: (appended: Appended) => Effect.Effect<Sequenced, AppendNotCommitted | SqlError>
    /**
     * Runs a producer's own work and the append in one transaction, the append last, then
     * commits. Use it as the outermost transaction: nested in another one it becomes a savepoint
     * and the commit lock is held until the outer transaction ends.
     */
    readonly appendAfter: <A, E, R>(
      work: Effect.Effect<A, E, R>,
      events: (value: A) => ReadonlyArray<NewEvent>,
    ) => Effect.Effect<{ readonly value: A; readonly appended: Option.Option<Appended> }, E | AppendError, R>
    /** Up to `limit` events with `seq > afterSeq`, in seq order, from one snapshot. */
    readonly read: (afterSeq: bigint, limit: number) => Effect.Effect<ReadonlyArray<Event>, SqlError>
    /**
     * `read`, bounded by `head`, read first. Because the log is gapless, any seq at or below `head`
     * that is missing from the result has left the log (retention), never "not committed yet".
     */
    readonly readWithHead: (
      afterSeq: bigint,
      limit: number,
    ) => Effect.Effect<{ readonly head: Head; readonly events: ReadonlyArray<Event> }, SqlError>
    /**
     * `readWithHead` after the `last_seq` that `from` yields: `from` is a query returning at most
     * one row with a `last_seq` column and a `last_at` column, a lower bound of the times after it
     * (a consumer's locked cursor row, say; `'-infinity'` for none). Two statements (see
     * `readFromWith`): inside a transaction, a lock `from` takes holds for the read. No row: `None`.
     */
    readonly readFrom: (
      from: Statement.Fragment,
      limit: number,
    ) => Effect.Effect<
      Option.Option<{
        readonly after: bigint
        readonly head: Head
        /** The head's time (`event_seq.last_at`) as text, exact to the microsecond. */
        readonly headAt: string
        readonly events: ReadonlyArray<Event>
      }>,
      SqlError
    >
    readonly head: Effect.Effect<Head, SqlError>
  }
>()("bothy/EventLog") {
  /** The `counter` mode: appends numbered in their own transaction, commits serialized. */
  static readonly layer = Layer.effect(
    EventLog,
    Effect.suspend(() => make("counter")),
  )
  /** The `post_commit` mode: appends commit in parallel; a `Sequencer` must run somewhere to number them. */
  static readonly layerPostCommit = Layer.effect(
    EventLog,
    Effect.suspend(() => make("pending")),
  )
  /**
   * `post_commit` sequenced in place: appends wait in `event_log` itself, with provisional seqs,
   * for a `Sequencer` with `placement: "in_place"`. Measured beside `layerPostCommit` and not kept
   * as the mode (docs/decisions.md, "Sequencing in place"); the append benchmark runs it.
   */
  static readonly layerPostCommitInPlace = Layer.effect(
    EventLog,
    Effect.suspend(() => make("in_place")),
  )
  static readonly layerFor = (sequencing: LogSequencing) =>
    sequencing === "counter" ? EventLog.layer : EventLog.layerPostCommit
}

/** Where an append goes: numbered at once, or waiting for the sequencer in place or apart. */
type Placement = "counter" | "in_place" | "pending"

const appenders = {
  counter: appendWith,
  in_place: appendInPlaceWith,
  pending: appendPendingWith,
} as const

const make = (placement: Placement) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const catalog = yield* EventTypeValidation.make(sql)
    const appendNow = appenders[placement](sql, catalog)
    // Waiting appends wake the sequencer once their transaction (the outermost) committed.
    const woken = placement === "counter" ? undefined : yield* AppendWake.make(sql, appendedChannel)
    const append =
      woken === undefined
        ? appendNow
        : (events: ReadonlyArray<NewEvent>) => Effect.tap(appendNow(events), () => sql.afterCommit(woken.wake))
    const appendAfter = <A, E, R>(work: Effect.Effect<A, E, R>, events: (value: A) => ReadonlyArray<NewEvent>) =>
      sql.withTransaction(
        Effect.gen(function* () {
          const value = yield* work
          const batch = events(value)
          const appended = batch.length === 0 ? Option.none() : Option.some(yield* append(batch))
          return { value, appended }
        }),
      )
    const readFrom = readFromWith(sql)
    const readWithHead = (afterSeq: bigint, limit: number) =>
      readFrom(sql`SELECT ${afterSeq}::int8 AS last_seq, '-infinity'::timestamptz AS last_at`, limit).pipe(
        Effect.flatMap(
          Option.match({
            onNone: () => noCounterRow,
            onSome: ({ head, events }) => Effect.succeed({ head, events }),
          }),
        ),
      )
    const head = sql<Head>`SELECT value AS seq, epoch FROM event_seq`.pipe(
      Effect.flatMap(([row]) => (row === undefined ? noCounterRow : Effect.succeed(row))),
      Effect.withSpan("EventLog.head"),
    )
    return EventLog.of({
      append,
      sequenced: sequencedWith(sql),
      appendAfter,
      read: readWith(sql),
      readWithHead,
      readFrom,
      head,
    })
  })
