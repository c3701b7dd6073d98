/**
 * Retention of the event log, by time: keeps day partitions created ahead, and detaches, then
 * drops, every day partition older than `sync.event_retention`. Rows are never DELETEd, and
 * retention never waits for a cursor: a consumer that stood still longer loses the events, and its
 * round reports the lost range (docs/retention.md).
 *
 * Each run, timed by `Clock` (`now`):
 *
 *   finalize   every detach left pending (`pg_inherits.inhdetachpending`: an interrupted
 *              `DETACH ... CONCURRENTLY` leaves its partition invisible and blocks every other
 *              detach) is finished with `DETACH ... FINALIZE`
 *   detach     each attached day partition whose whole day ended before now − retention:
 *              `DETACH PARTITION ... CONCURRENTLY`, which waits for the transactions that still see
 *              the partition (a round reading it keeps its rows) and blocks no appender
 *   drop       each detached day table (`event_log_YYYYMMDD`) older than the window, whoever
 *              detached it (archive a day by renaming it), in pieces `dropPause` apart: each
 *              hour leaf, then the day (a whole day made before migration 0017: each index,
 *              then the table)
 *   ensure     the partitions from today through today + runway (by `now`, so a worker that was
 *              down for days creates the ones it missed)
 *
 * One run at a time across workers (`RetentionLease`): a run that finds the lease held does nothing
 * and says so (`busy`); the holder's run does the work, and the next run after it any left over.
 *
 * Every statement runs under a lock timeout (it never queues for long behind a lock) and a
 * statement timeout (a reader that never ends cannot hold a detach for ever: it is left pending,
 * and the next run finishes it). FINALIZE and the drops run each in a transaction of its own with
 * the timeouts `SET LOCAL`, which a transaction pooler carries. DETACH CONCURRENTLY cannot run in a
 * transaction block or beside another statement, so its timeouts are session settings: it runs
 * alone on a session of its own (`DatabaseSessions`: a reserved connection, or one over
 * `DATABASE_DIRECT_URL`); behind a transaction pooler without a direct URL it is skipped with
 * `PoolerSessionOnly`, which names the variable to set. Two workers running at once only get in each
 * other's way (the lease above keeps them apart while it holds): the loser's statement fails on the
 * lock or finds the work done, and is skipped.
 *
 * Why a drop goes in pieces: dropping a table frees its blocks at once, and on a filesystem that
 * discards freed blocks online (ext4 mounted with `discard`, usual on cloud disks) the journal
 * commit that carries the discard holds up every WAL flush of the server. Measured here, dropping
 * a 142 MB day (1,000,000 events) in one statement stalled appends up to 76 ms, with its indexes
 * dropped first (each alone, a second apart) up to 42 ms, an hour leaf at a time (200 ms apart)
 * up to 14 ms; without online discard, up to 12 ms in one statement (docs/retention.md).
 */
import { Clock, Duration, Effect, Layer, Option, Schedule } from "effect"
import { SqlClient } from "effect/sql"
import type { SqlError } from "effect/sql/SqlError"
import type { PoolerSessionOnly } from "../platform/DatabaseSessions.ts"
import * as DatabaseSessions from "../platform/DatabaseSessions.ts"
import { pgFailure } from "../platform/PgError.ts"
import * as SqlInterval from "../platform/SqlInterval.ts"
import * as EventLogDetach from "./EventLogDetach.ts"
import * as EventLogPartitions from "./EventLogPartitions.ts"
import * as RetentionLease from "./RetentionLease.ts"

export interface RetentionOptions {
  /** `sync.event_retention`. */
  readonly retention: Duration.Duration
  /** How far ahead partitions exist; default `EventLogPartitions.runway` (14 days). */
  readonly runway?: Duration.Duration
  /** How long a detach may wait for a lock. Default 5 s. */
  readonly lockTimeout?: Duration.Duration
  /** How long a detach may wait for the readers of its partition. Default 5 minutes. */
  readonly statementTimeout?: Duration.Duration
  /** The pause between the pieces of a drop, by `Clock` (see the module header). Default 200 ms. */
  readonly dropPause?: Duration.Duration
}

export interface RetentionRun {
  readonly finalized: ReadonlyArray<string>
  readonly detached: ReadonlyArray<string>
  readonly dropped: ReadonlyArray<string>
  readonly created: number
  /** Statements that failed (another worker's lock, a timeout): retried by the next run. */
  readonly skipped: ReadonlyArray<{ readonly partition: string; readonly reason: string }>
  /** Another worker's run held the lease: this one did nothing. */
  readonly busy: boolean
}

interface DayTable {
  readonly name: string
  readonly attached: boolean
  readonly pending: boolean
}

/** The day tables of the log (`event_log_YYYYMMDD`) whose day ended before `cutoff`, oldest first. */
const oldDays = (sql: SqlClient.SqlClient, cutoff: Date) =>
  sql<DayTable>`
    SELECT c.relname AS name, i.inhrelid IS NOT NULL AS attached, coalesce(i.inhdetachpending, false) AS pending
    FROM pg_class AS c
    JOIN pg_namespace AS n ON n.oid = c.relnamespace AND n.nspname = current_schema()
    LEFT JOIN pg_inherits AS i ON i.inhrelid = c.oid AND i.inhparent = 'event_log'::regclass
    WHERE c.relkind IN ('r', 'p')
      AND ${EventLogPartitions.dayOf(sql, sql`c.relname`)} + 1 <= (${cutoff.toISOString()}::timestamptz AT TIME ZONE 'UTC')::date
    ORDER BY c.relname`

type Timeouts = Pick<Required<RetentionOptions>, "lockTimeout" | "statementTimeout">

const timeouts = (options: Timeouts) =>
  [
    ["lock_timeout", String(Duration.toMillis(options.lockTimeout))],
    ["statement_timeout", String(Duration.toMillis(options.statementTimeout))],
  ] as const

/** Runs `statement` in a transaction of its own, under the timeouts (`SET LOCAL`). */
const inTransaction = (sql: SqlClient.SqlClient, statement: string, options: Timeouts) =>
  sql.withTransaction(
    Effect.andThen(
      Effect.forEach(timeouts(options), ([name, value]) => sql.unsafe(`SET LOCAL ${name} = ${value}`), {
        discard: true,
      }),
      sql.unsafe(statement),
    ),
  )

/**
 * Runs `statement`, which cannot run in a transaction block, alone on a session of its own under
 * the timeouts: reserved from the pool (and reset before it goes back), or over the direct URL.
 */
const alone = (sql: SqlClient.SqlClient, statement: string, options: Timeouts) =>
  Effect.scoped(
    Effect.gen(function* () {
      const target = yield* DatabaseSessions.session("retention's DETACH PARTITION ... CONCURRENTLY")
      if (Option.isSome(target.url)) {
        const settings = timeouts(options).map(([name, value]) => `SET ${name} = ${value}`)
        return yield* DatabaseSessions.runOnOwnSession(target.url.value, target, [...settings, statement])
      }
      const connection = yield* sql.reserve
      const each = (f: (setting: readonly [string, string]) => string) =>
        Effect.forEach(timeouts(options), (setting) => connection.executeRaw(f(setting), []), { discard: true })
      yield* Effect.acquireRelease(
        each(([name, value]) => `SET ${name} = ${value}`),
        () => Effect.ignore(each(([name]) => `RESET ${name}`)),
      )
      yield* connection.executeRaw(statement, [])
    }),
  )

const quoted = (name: string) => `"${name.replaceAll('"', '""')}"`

/** The default pause between the pieces of a drop. */
export const dropPause = Duration.millis(200)

/**
 * The statements that drop a detached day table in pieces: a day split by hour (migration 0017)
 * leaf by leaf, then the day; a whole day (created before) index by index (its constraint for a
 * key), then the table.
 */
const dropPieces = (sql: SqlClient.SqlClient, table: string) =>
  Effect.map(
    sql<{ statement: string }>`
      WITH day AS (SELECT ${quoted(table)}::regclass AS oid)
      SELECT format('DROP TABLE %s', i.inhrelid::regclass) AS statement, 0 AS kind, c.relname AS name
      FROM day JOIN pg_inherits AS i ON i.inhparent = day.oid JOIN pg_class AS c ON c.oid = i.inhrelid
      UNION ALL
      SELECT CASE WHEN con.conname IS NULL THEN format('DROP INDEX %s', x.indexrelid::regclass)
                  ELSE format('ALTER TABLE %I DROP CONSTRAINT %I', ${table}::text, con.conname) END,
             1, x.indexrelid::regclass::text
      FROM day JOIN pg_class AS t ON t.oid = day.oid AND t.relkind = 'r'
      JOIN pg_index AS x ON x.indrelid = day.oid
      LEFT JOIN pg_constraint AS con ON con.conindid = x.indexrelid AND con.conrelid = x.indrelid
      ORDER BY kind, name`,
    (rows) => [...rows.map((r) => r.statement), `DROP TABLE ${quoted(table)}`],
  )

/** One run at `now` (see the module header). Failing statements are skipped and reported, never fatal. */
export const run = Effect.fn("Retention.run")(function* (options: RetentionOptions) {
  return yield* Effect.scoped(
    Effect.gen(function* () {
      if (!(yield* RetentionLease.hold())) return elsewhere
      return yield* runHeld(options)
    }),
  )
})

/** What a run that found the lease held returns. */
const elsewhere: RetentionRun = { finalized: [], detached: [], dropped: [], created: 0, skipped: [], busy: true }

const runHeld = Effect.fnUntraced(function* (options: RetentionOptions) {
  const sql = yield* SqlClient.SqlClient
  const settings: Required<RetentionOptions> = {
    runway: EventLogPartitions.runway,
    lockTimeout: Duration.seconds(5),
    statementTimeout: Duration.minutes(5),
    dropPause,
    ...options,
  }
  const now = yield* Clock.currentTimeMillis
  const cutoff = new Date(now - Duration.toMillis(settings.retention))
  const skipped: Array<{ partition: string; reason: string }> = []
  const attempt = (partition: string, statement: Effect.Effect<unknown, SqlError | PoolerSessionOnly>) =>
    statement.pipe(
      Effect.as(true),
      Effect.catch((e) =>
        Effect.sync(() => {
          skipped.push({ partition, reason: e._tag === "PoolerSessionOnly" ? e.message : pgFailure(e).message })
          return false
        }),
      ),
    )
  const inOne = (statement: string) => inTransaction(sql, statement, settings)

  const finalized: Array<string> = []
  for (const { name } of yield* EventLogDetach.pending(sql)) {
    if (yield* attempt(name, inOne(`ALTER TABLE event_log DETACH PARTITION ${quoted(name)} FINALIZE`)))
      finalized.push(name)
  }
  const detached: Array<string> = []
  for (const day of yield* oldDays(sql, cutoff)) {
    if (!day.attached || day.pending) continue
    if (
      yield* attempt(
        day.name,
        alone(sql, `ALTER TABLE event_log DETACH PARTITION ${quoted(day.name)} CONCURRENTLY`, settings),
      )
    )
      detached.push(day.name)
  }
  const dropped: Array<string> = []
  for (const day of yield* oldDays(sql, cutoff)) {
    if (day.attached) continue
    // Another worker may drop it meanwhile: the piece that fails is reported, the next run goes on.
    const pieces = yield* dropPieces(sql, day.name).pipe(Effect.catch(() => Effect.succeed([])))
    let whole = pieces.length > 0
    for (const [i, statement] of pieces.entries()) {
      if (i > 0) yield* Effect.sleep(settings.dropPause)
      if (!(yield* attempt(day.name, inOne(statement)))) {
        whole = false
        break
      }
    }
    if (whole) dropped.push(day.name)
  }
  const [ensured] = yield* sql<{ created: number }>`
    SELECT event_log_ensure_partitions(${new Date(now).toISOString()}::timestamptz,
                                       ${SqlInterval.millis(sql, Duration.toMillis(settings.runway))}) AS created`
  return { finalized, detached, dropped, created: ensured?.created ?? 0, skipped, busy: false } satisfies RetentionRun
})

const report = (r: RetentionRun) =>
  Effect.gen(function* () {
    if (r.busy) return yield* Effect.logDebug("retention: another worker's run holds the lease; nothing done")
    if (r.created > 0) yield* Effect.logInfo(`retention: created ${r.created} event_log partitions`)
    if (r.finalized.length > 0)
      yield* Effect.logInfo(`retention: finished pending detaches of ${r.finalized.join(", ")}`)
    if (r.detached.length > 0) yield* Effect.logInfo(`retention: detached ${r.detached.join(", ")}`)
    if (r.dropped.length > 0) yield* Effect.logInfo(`retention: dropped ${r.dropped.join(", ")}`)
    for (const s of r.skipped) yield* Effect.logWarning(`retention: ${s.partition} left for the next run: ${s.reason}`)
  })

/** How often the worker runs retention. */
export const interval = Duration.hours(1)

/** Runs retention at start and every `interval` (by `Clock`), for the layer's lifetime. */
export const layer = (options: RetentionOptions & { readonly onRun?: (r: RetentionRun) => Effect.Effect<void> }) =>
  Layer.effectDiscard(
    run(options).pipe(
      Effect.tap(report),
      Effect.tap((r) => options.onRun?.(r) ?? Effect.void),
      Effect.catchCause((cause) => Effect.logError("retention run failed", cause)),
      Effect.repeat(Schedule.spaced(interval)),
      Effect.forkScoped,
    ),
  )
