/**
 * One consumer round: a single transaction that creates every job for the next batch of events
 * and advances the cursor, so the jobs and the cursor move together or not at all.
 *
 *   BEGIN
 *   lock cursor row (FOR UPDATE SKIP LOCKED) with the head, then read the batch after last_seq up
 *   to that head (`EventLog.readFrom`) ── row held elsewhere ──> ROLLBACK, Locked
 *   head below what this process read (`LogRewind`) ──> ROLLBACK, recover, round again
 *   report lost ranges to the loss handler (seqs at or below head that are gone)
 *   nothing new ──> ROLLBACK, CaughtUp
 *   fan out
 *   insert jobs (unique key: consumer, seq, receiver) and advance last_seq, in one statement
 *   COMMIT, Processed
 *
 * Any failure, defect or interruption before COMMIT rolls back jobs and cursor together; the next
 * round reads the same batch again. Two workers never run the same consumer's round at once: the
 * second finds the row locked and ends at once, without waiting and without writing.
 */
import { type Array as Arr, Data, Effect, Option, type Schema } from "effect"
import { SqlClient, type Statement } from "effect/sql"
import type { SqlError } from "effect/sql/SqlError"
import { type InvalidJob, Jobs } from "../jobs/Jobs.ts"
import type { Event } from "../log/Event.ts"
import { EventLog, type Head } from "../log/EventLog.ts"
import { type Guard, LogRewind, LogRewound, newerThan, rewoundSql } from "../log/LogRewind.ts"
import * as TraceParent from "../platform/TraceParent.ts"
import * as ReadWindow from "./ReadWindow.ts"

/** A job the fan-out wants for one event and one receiver. */
export interface FanOutJob {
  readonly seq: bigint
  /** Who receives it (a subscription id, a push registration...): part of the job's unique key. */
  readonly receiver: string
  readonly kind: string
  readonly queue?: string
  readonly args: Schema.Json
  readonly priority?: number
  readonly maxAttempts?: number
  readonly scheduledAt?: Date
}

/** Seqs that had left the log (retention) before the consumer read them; bounds inclusive. */
export interface LostRange {
  readonly firstSeq: bigint
  readonly lastSeq: bigint
}

export type RoundOutcome =
  | { readonly _tag: "Locked" }
  | { readonly _tag: "CaughtUp"; readonly lastSeq: bigint }
  | {
      readonly _tag: "Processed"
      readonly fromSeq: bigint
      readonly toSeq: bigint
      readonly events: number
      readonly jobs: number
      /** Jobs the unique key suppressed: 0 unless something is wrong with the round itself. */
      readonly suppressed: number
      readonly lost: ReadonlyArray<LostRange>
      /** The batch was full: more events are waiting. */
      readonly full: boolean
      readonly head: Head
      /** When the oldest event still waiting was committed (none when caught up). */
      readonly nextOccurredAt: Date | undefined
    }

export interface RoundOptions<E, R> {
  readonly name: string
  readonly batchSize: number
  readonly fanOut: (events: Arr.NonEmptyReadonlyArray<Event>) => Effect.Effect<ReadonlyArray<FanOutJob>, E, R>
  /** Runs inside the round's transaction, once per lost range. */
  readonly onLoss: (lost: LostRange) => Effect.Effect<void, E, R>
  /**
   * For a consumer whose fan-out SQL can do alone: the whole round as one autocommitted statement
   * (one round trip instead of four), with the same outcome and the same jobs as the round below:
   * `StatementRound.make` with the consumer's fan-out as SQL. `undefined` when it cannot (events
   * lost from the log): the transactional round runs instead.
   */
  readonly oneStatement?: (round: RoundOf) => Effect.Effect<RoundOutcome | undefined, E | SqlError | LogRewound, R>
}

/** What the round gives a consumer's `oneStatement`: its name, batch size, `ReadWindow` and `LogRewind` guard. */
export interface RoundOf {
  readonly name: string
  readonly batchSize: number
  readonly window: ReadWindow.ReadWindow
  readonly guard: Guard
}

/** Ends a round that wrote nothing by rolling its transaction back. */
class NothingToCommit extends Data.TaggedError("NothingToCommit")<{ readonly outcome: RoundOutcome }> {}

/**
 * A round's job is unique per consumer, event and receiver: `consumer:seq:receiver`. The format's
 * one definition, as text here and in SQL (`uniqueKeySql`, for `StatementRound`) below it.
 */
export const uniqueKey = (consumer: string, seq: bigint, receiver: string) => `${consumer}:${seq}:${receiver}`

/** `uniqueKey` as an SQL expression over the columns (or values) `seq` and `receiver`. */
export const uniqueKeySql = (
  sql: SqlClient.SqlClient,
  consumer: string,
  seq: Statement.Fragment,
  receiver: Statement.Fragment,
) => sql`(${consumer}::text || ':' || ${seq} || ':' || ${receiver})`

/**
 * The ranges missing from a batch read after `last`, and the seq the cursor moves to. `head`: the
 * snapshot's head when the read was not full; the log is gapless, so anything up to it that the
 * read did not return is gone.
 */
const holes = (last: bigint, batch: ReadonlyArray<Event>, head: bigint | undefined) => {
  const lost: Array<LostRange> = []
  let expected = last + 1n
  for (const event of batch) {
    if (event.seq > expected) lost.push({ firstSeq: expected, lastSeq: event.seq - 1n })
    expected = event.seq + 1n
  }
  if (head !== undefined && head >= expected) {
    lost.push({ firstSeq: expected, lastSeq: head })
    expected = head + 1n
  }
  return { lost, toSeq: expected - 1n }
}

/** Builds the round of one consumer. */
export const make = Effect.fnUntraced(function* <E, R>(options: RoundOptions<E, R>) {
  const sql = yield* SqlClient.SqlClient
  const log = yield* EventLog
  const jobs = yield* Jobs
  const guard = yield* LogRewind
  const { name, batchSize } = options

  // The round is BEGIN, the lock with the head, the read, the fan-out's own statements, the job
  // insert with the cursor update, COMMIT.
  const lockCursor = sql`
    SELECT last_seq, last_at FROM event_consumer_cursors WHERE name = ${name} FOR UPDATE SKIP LOCKED`

  const body = Effect.gen(function* () {
    // One more than a batch: tells whether more is waiting, and how old it is, for the gauges.
    const position = yield* log.readFrom(lockCursor, batchSize + 1)
    if (Option.isNone(position)) return { _tag: "Locked" } as const
    const { after: last, head, headAt, events: read } = position.value
    // The log went back below what this process read (`LogRewind`): nothing commits.
    const floor = guard.floor()
    const [check] =
      floor === undefined || (floor.seq === head.seq && floor.at === headAt)
        ? [{ rewound: false }]
        : yield* sql<{ rewound: boolean }>`
            SELECT ${rewoundSql(
              sql,
              floor,
              { seq: sql`${head.seq}::bigint`, epoch: sql`${head.epoch}::int` },
              newerThan(sql, floor, last, headAt),
            )} AS rewound`.unprepared
    yield* guard.see({ ...head, at: headAt }, check?.rewound === true)
    const full = read.length > batchSize
    const batch = full ? read.slice(0, batchSize) : read

    const { lost, toSeq } = holes(last, batch, full ? undefined : head.seq)
    // Nothing to write: roll back rather than commit, since the row lock alone would make COMMIT
    // wait for a WAL flush.
    if (toSeq === last) return yield* new NothingToCommit({ outcome: { _tag: "CaughtUp", lastSeq: last } })

    for (const range of lost) yield* options.onLoss(range)
    // The batch's newest time (to the millisecond, rounded down: still a lower bound of what follows).
    const lastAt = batch.at(-1)?.occurredAt.toISOString() ?? "-infinity"
    const wanted = batch.length > 0 ? yield* options.fanOut(batch as Arr.NonEmptyReadonlyArray<Event>) : []
    const traceParents = new Map(batch.map((e) => [e.seq, e.traceParent]))
    yield* TraceParent.linkCurrent(batch.map((e) => e.traceParent))
    const inserted = yield* jobs.insert(
      wanted.map((job) => ({
        kind: job.kind,
        args: job.args,
        uniqueKey: uniqueKey(name, job.seq, job.receiver),
        traceParent: traceParents.get(job.seq) ?? null,
        ...(job.queue === undefined ? {} : { queue: job.queue }),
        ...(job.priority === undefined ? {} : { priority: job.priority }),
        ...(job.maxAttempts === undefined ? {} : { maxAttempts: job.maxAttempts }),
        ...(job.scheduledAt === undefined ? {} : { scheduledAt: job.scheduledAt }),
      })),
      {
        alongside: sql`
          UPDATE event_consumer_cursors
          SET last_seq = ${toSeq}, last_at = greatest(last_at, ${lastAt}::timestamptz), updated_at = clock_timestamp()
          WHERE name = ${name}`,
      },
    )
    return {
      _tag: "Processed",
      fromSeq: last + 1n,
      toSeq,
      events: batch.length,
      jobs: inserted.inserted,
      suppressed: inserted.suppressed,
      lost,
      full,
      head,
      nextOccurredAt: full ? read[batchSize]!.occurredAt : undefined,
    } as const
  })

  const transactional = sql.withTransaction(body).pipe(
    Effect.catchIf(
      (e): e is NothingToCommit => e instanceof NothingToCommit,
      (nothing) => Effect.succeed(nothing.outcome),
    ),
  )
  const oneStatement = options.oneStatement?.({ name, batchSize, window: yield* ReadWindow.make, guard })
  const attempt: Effect.Effect<RoundOutcome, E | InvalidJob | SqlError | LogRewound, R> = (
    oneStatement === undefined
      ? transactional
      : Effect.flatMap(oneStatement, (outcome) => (outcome === undefined ? transactional : Effect.succeed(outcome)))
  ).pipe(Effect.withSpan("Consumer.round", { attributes: { consumer: name } }))
  // A rewind is recovered (the worker finalizes it) and the round runs again on the new epoch.
  const round = attempt.pipe(
    Effect.catchIf(
      (e): e is LogRewound => e instanceof LogRewound,
      (rewound) =>
        Effect.logError(rewound.message).pipe(Effect.andThen(guard.recover(rewound)), Effect.andThen(attempt)),
    ),
  )
  return round
})
