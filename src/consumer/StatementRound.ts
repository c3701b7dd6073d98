/**
 * A consumer round as one autocommitted statement, for a consumer whose fan-out SQL can do alone:
 * one round trip instead of the transactional round's four, with the same jobs, the same cursor
 * move and the same outcome as `ConsumerRound`. The consumer gives only its fan-out, as CTEs; the
 * framework writes the rest:
 *
 *   cursor    lock the cursor row (FOR UPDATE SKIP LOCKED) ── held elsewhere ──> no row: Locked
 *   read      the batch after last_seq, plus one event (is more waiting, and since when); its
 *             time between the cursor's last_at and the head's, and within the `ReadWindow`
 *             given as parameters; from the window's day partitions, named, when it covers at
 *             most two days (see `source`)
 *   bounds    where the batch starts (the cursor) and ends, its size, whether more is waiting,
 *             and the head
 *   go        the batch follows the cursor without a hole, nothing is missing up
 *             to the head, the cursor row locked is the one the statement's snapshot sees, and
 *             the head is not below what this process read in its epoch (`LogRewind`: else the
 *             round fails with `LogRewound` and the rewind is recovered)
 *   ev        the batch when go, else empty
 *   ...       the fan-out's CTEs, ending in `wanted`
 *   jobs_*    the jobs wanted, through `Jobs.insertCtes` (unique key: `ConsumerRound.uniqueKeySql`)
 *   moved     the cursor to the batch's last seq when go
 *   unflushed when not go: the statement wrote nothing but its row lock, so its commit need not
 *             wait for the WAL flush
 *
 * When not go and events are waiting (events lost from the log, whose loss handler runs in the
 * transactional round), the outcome is `undefined`: `ConsumerRound` runs the transactional round
 * instead, and since nothing was written, it starts from the same cursor.
 */
import { Effect } from "effect"
import { SqlClient, type Statement } from "effect/sql"
import type { SqlError } from "effect/sql/SqlError"
import * as Jobs from "../jobs/Jobs.ts"
import * as EventLog from "../log/EventLog.ts"
import * as EventLogPartitions from "../log/EventLogPartitions.ts"
import { type Floor, type Guard, LogRewind, type LogRewound, rewoundSql } from "../log/LogRewind.ts"
import { pgFailure } from "../platform/PgError.ts"
import * as TraceParent from "../platform/TraceParent.ts"
import { type RoundOutcome, uniqueKeySql } from "./ConsumerRound.ts"
import * as ReadWindow from "./ReadWindow.ts"

/**
 * A consumer's fan-out as SQL. `ctes` follow `ev (seq bigint, space text, type text, epoch int,
 * trace_parent text, actor text, occurred_at timestamptz)`, plus `payload jsonb` when `payload` is
 * set, the batch's events (empty when the round writes nothing), do the consumer's
 * own writes, and end in `wanted (seq bigint, receiver text, kind text, queue text, args jsonb,
 * max_attempts int)`: one row per job, for the event `seq` and the receiver `receiver` (its unique
 * key's parts); a NULL queue or max_attempts takes the job default. The job gets the event's
 * trace_parent, as in the transactional round. Parameters in a CTE's select list need a cast
 * (`${kind}::text`): nothing else tells PostgreSQL their type.
 */
export interface StatementFanOut {
  readonly ctes: (sql: SqlClient.SqlClient) => Statement.Fragment
  /**
   * The CTEs among `ctes` that are SELECTs run for a side effect (a `pg_notify`): PostgreSQL runs
   * a SELECT in WITH only as far as the statement reads it, so the round reads these.
   */
  readonly sideEffects?: ReadonlyArray<string>
  /**
   * The fan-out reads the events' payloads (`ev.payload`): the round then reads them with the
   * batch. Off, the round leaves them in the log, as a fan-out that decides by space and type
   * needs no more.
   */
  readonly payload?: boolean
}

export interface StatementRoundOptions {
  readonly name: string
  readonly batchSize: number
  readonly fanOut: StatementFanOut
  /** What the consumer's earlier rounds saw; without it, the round looks its window up first. */
  readonly window?: ReadWindow.ReadWindow
  /** The process's `LogRewind` guard; without it, the one in the context (off unless provided). */
  readonly guard?: Guard
}

interface Row {
  readonly after: bigint
  readonly head: bigint
  readonly headEpoch: number
  readonly headAt: string
  readonly rewound: boolean
  readonly events: number
  readonly toSeq: bigint | null
  readonly full: boolean
  readonly nextOccurredAt: Date | null
  readonly ok: boolean
  readonly cursorAt: Date | null
  readonly dbNow: Date
  readonly wanted: number
  readonly inserted: number
  /** Of the events the round wrote for, the first `TraceParent.maxLinks` traces (null without any). */
  readonly traceParents: ReadonlyArray<string> | null
}

/** What the read takes of an event; the payload too when the fan-out asks for it. */
const columnsOf = (payload: boolean | undefined) =>
  `seq, space_id, type, epoch, occurred_at, trace_parent, actor${payload === true ? ", payload" : ""}`

/**
 * The day partitions a round with `window` names in its read (`EventLog.daysOfWindow`: at most two
 * days, as the drainer's read names them); `undefined`: it reads `event_log`.
 */
export const namedDays = (window: ReadWindow.Window | undefined) =>
  window === undefined ? undefined : EventLog.daysOfWindow(window.since, window.until)

/**
 * Where the read reads: the window's day partitions when it covers at most two days, else
 * `event_log`. Over `event_log`, PostgreSQL either plans the round afresh every time (1.83 to
 * 1.89 ms a round at 361 and 1,033 leaves, `npm run bench -- retention`'s data) or runs a generic
 * plan, which prunes by the window's parameters only after locking and setting up every leaf.
 * Over a day's partition (24 leaves, or one for a day created whole) it runs the generic plan:
 * 1.28 to 1.38 ms. A day that is detached, or pending detach, is read as empty, as `event_log`
 * reads it; one dropped fails the statement (`undefined_table`) and the transactional round takes
 * over. The statement's text names the days, so each day's round is a prepared statement of its own.
 */
const source = (sql: SqlClient.SqlClient, window: ReadWindow.Window | undefined, columns: string): Statement.Fragment =>
  EventLogPartitions.source(sql, namedDays(window), columns)

/** The round's outcome from its row; `undefined` for the transactional round to take over. */
const outcome = (row: Row | undefined): RoundOutcome | undefined => {
  if (row === undefined) return { _tag: "Locked" }
  if (row.events === 0 && row.head === row.after) return { _tag: "CaughtUp", lastSeq: row.after }
  if (!row.ok || row.toSeq === null) return undefined
  return {
    _tag: "Processed",
    fromSeq: row.after + 1n,
    toSeq: row.toSeq,
    events: row.events,
    jobs: row.inserted,
    suppressed: row.wanted - row.inserted,
    lost: [],
    full: row.full,
    head: { seq: row.head, epoch: row.headEpoch },
    nextOccurredAt: row.nextOccurredAt ?? undefined,
  }
}

/**
 * The round's one statement (see the module header), for the consumer `name` whose earlier rounds
 * saw `bounds` (none: it reads `event_log` unbounded by a window). Its composed text, for the
 * consumers bothy ships, is kept in docs/sql/ (test/project/SqlSnapshots.test.ts).
 */
export const statement = (
  sql: SqlClient.SqlClient,
  options: Pick<StatementRoundOptions, "name" | "batchSize" | "fanOut">,
  bounds?: ReadWindow.Window | undefined,
  floor?: Floor | undefined,
) => {
  const { name, batchSize, fanOut } = options
  const read = (cte: string) => sql`(SELECT count(*) FROM ${sql(cte)})`
  const columns = columnsOf(fanOut.payload)
  const payload = sql.literal(fanOut.payload === true ? ", payload" : "")
  return sql<Row>`
      WITH cursor AS MATERIALIZED (
        SELECT last_seq, last_at, xmin AS version FROM event_consumer_cursors WHERE name = ${name} FOR UPDATE SKIP LOCKED
      ), read AS MATERIALIZED (
        SELECT e.seq, e.space_id AS space, e.type, e.epoch, e.occurred_at, e.trace_parent, e.actor${sql.literal(fanOut.payload === true ? ", e.payload" : "")},
               row_number() OVER (ORDER BY e.seq) AS n
        FROM cursor AS c CROSS JOIN LATERAL (
          SELECT ${sql.literal(columns)} FROM ${source(sql, bounds, columns)} AS l
          WHERE seq > c.last_seq AND occurred_at >= c.last_at AND occurred_at <= ${EventLog.headAt(sql)}
            AND occurred_at >= coalesce(${bounds?.since ?? null}::timestamptz, '-infinity')
            AND occurred_at <= coalesce(${bounds?.until ?? null}::timestamptz, 'infinity')
          ORDER BY seq LIMIT ${batchSize + 1}
        ) AS e
      ), bounds AS MATERIALIZED (
        SELECT c.last_seq AS after, c.last_at AS after_at, h.seq AS head, h.epoch AS head_epoch, h.at::text AS head_at,
               -- the log went back below what this process read (LogRewind)
               ${rewoundSql(sql, floor, { seq: sql`h.seq`, epoch: sql`h.epoch` }, sql`read`)} AS rewound,
               -- A row locked in a newer version than the snapshot's was changed after the
               -- snapshot was taken (by a re-enabling, under this lock): what the snapshot says
               -- of the consumer's own tables is then older than the lock.
               c.version = (SELECT xmin FROM event_consumer_cursors WHERE name = ${name}) AS fresh,
               (SELECT count(*) FROM read WHERE n <= ${batchSize})::int AS events,
               (SELECT max(seq) FROM read WHERE n <= ${batchSize}) AS to_seq,
               (SELECT max(occurred_at) FROM read WHERE n <= ${batchSize}) AS to_at,
               (SELECT count(*) FROM read) > ${batchSize} AS is_full,
               (SELECT occurred_at FROM read WHERE n = ${batchSize + 1}) AS next_occurred_at
        FROM cursor AS c CROSS JOIN ${EventLog.head(sql)} AS h
      ), go AS MATERIALIZED (
        SELECT coalesce(fresh AND events > 0 AND to_seq - after = events AND (is_full OR to_seq = head)
                        AND NOT rewound, false) AS ok FROM bounds
      ), ev AS (
        SELECT seq, space, type, epoch, trace_parent, actor, occurred_at${payload} FROM read WHERE n <= ${batchSize} AND (SELECT ok FROM go)
      ), ${fanOut.ctes(sql)}, ${Jobs.insertCtes(
        sql,
        sql`(
          SELECT w.kind, w.queue, w.args, NULL::int2 AS priority, w.max_attempts, NULL::timestamptz AS scheduled_at,
                 ${uniqueKeySql(sql, name, sql`w.seq`, sql`w.receiver`)} AS unique_key, r.trace_parent
          FROM wanted AS w LEFT JOIN read AS r ON r.seq = w.seq
        )`,
      )}, moved AS (
        UPDATE event_consumer_cursors
        SET last_seq = (SELECT to_seq FROM bounds), last_at = greatest(last_at, (SELECT to_at FROM bounds)),
            updated_at = clock_timestamp()
        WHERE name = ${name} AND (SELECT ok FROM go)
      ), unflushed AS MATERIALIZED (
        SELECT set_config('synchronous_commit', 'off', true) WHERE NOT (SELECT ok FROM go)
      )
      SELECT b.after, b.head, b.head_epoch AS "headEpoch", b.head_at AS "headAt", b.rewound, b.events, b.to_seq AS "toSeq", b.is_full AS full,
             b.next_occurred_at AS "nextOccurredAt", g.ok, (SELECT count(*) FROM wanted)::int AS wanted,
             ${ReadWindow.cursorAtSql(sql, "CASE WHEN g.ok THEN greatest(b.after_at, b.to_at) ELSE b.after_at END")} AS "cursorAt",
             clock_timestamp() AS "dbNow",
             (SELECT array_agg(t.trace_parent) FROM (
                SELECT trace_parent FROM ev WHERE trace_parent IS NOT NULL ORDER BY seq LIMIT ${TraceParent.maxLinks}
              ) AS t) AS "traceParents",
             ${Jobs.insertCounts(sql)},
             ${sql.join(" + ", false)(["unflushed", ...(fanOut.sideEffects ?? [])].map(read))} AS side_effects
      FROM bounds AS b CROSS JOIN go AS g`
}

/**
 * One round of `name` as one statement (see the module header). Prepared: PostgreSQL plans it
 * generically after five runs (what that costs on a table of many leaves: `source`). Run
 * unprepared (planned each time, pruned while planning) it was slower at every size measured
 * (`npm run bench -- retention`).
 */
export const make = (
  options: StatementRoundOptions,
): Effect.Effect<RoundOutcome | undefined, SqlError | LogRewound, SqlClient.SqlClient> =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const { name } = options
    const window = options.window ?? (yield* ReadWindow.make)
    const bounds = yield* window.next(name)
    const guard = options.guard ?? (yield* LogRewind)
    const rows = yield* statement(sql, options, bounds, guard.floor()).pipe(
      // A day named in the read was dropped (the cursor stood still past the retention).
      Effect.catchIf(
        (e) => pgFailure(e).code === "42P01",
        () => Effect.succeed(undefined),
      ),
    )
    if (rows === undefined) return undefined
    // Below the floor the statement wrote nothing; the round fails so the rewind is recovered.
    const row = rows[0]
    if (row !== undefined) yield* guard.see({ seq: row.head, epoch: row.headEpoch, at: row.headAt }, row.rewound)
    const result = outcome(rows[0])
    if (rows[0] !== undefined) yield* window.saw(rows[0])
    yield* TraceParent.linkCurrent(rows[0]?.traceParents ?? [])
    if (result?._tag === "Processed") yield* Jobs.countSuppressed(result.suppressed)
    return result
  }).pipe(Effect.withSpan("Consumer.statementRound", { attributes: { consumer: options.name } }))
