/**
 * The sequencer of the `post_commit` mode: a service any worker runs, of which one at a time (the
 * holder of `SequencerLease`) numbers committed appends, a batch at a time (`SequencerBatch`), and
 * NOTIFYs `event_log` after each. What it keeps true is the log's invariant: a seq, once given, is
 * never followed by a lower one becoming visible, and no committed append is skipped or numbered
 * twice, whichever process dies when.
 *
 *              acquired                          batch full
 *   Standby ─────────────────> Leading ─────────────────────> Leading (at once)
 *    │  ^                        │  │ batch short ─── busyInterval or a wake-up ──> Leading
 *    │  │                        │  │ batch empty ─── pollInterval or a wake-up ──> Leading
 *    │  └── lease refused ───────┘  │ renew due (a third of the lease) ──> renew, then batch
 *    └─ not acquired: sleep standbyInterval ──> Standby
 *
 * A step that fails (the database away, a missing partition) is logged and retried after
 * `standbyInterval` in the same state; a holder that cannot renew loses the lease when it expires,
 * and its batches are refused from then on (the batch checks the lease itself). On shutdown the
 * holder gives the lease up, so a standby takes over at its next try instead of after the lease.
 *
 * The holder polls, every `pollInterval` while idle, every `busyInterval` while appends come
 * (the wait before the next batch is most of an append's commit-to-readable time under load), at
 * once after a full batch, and is woken
 * earlier by appends (`AppendWake`, through the process's `NotificationStream` when there is one):
 * not by a NOTIFY in the producer's transaction, which would serialize their commits again (see
 * `EventLog`), but by one after the commit, at most one a poll interval from each producer process.
 * That wait is the extra hop of latency the mode costs.
 *
 * `placement` says where the appends wait: in `event_log_pending`, moved into the log by
 * `SequencerBatch` (the mode bothy keeps), or in `event_log` itself, numbered where they lie by
 * `SequencerBatchInPlace` within the bounds `UnsequencedBounds` keeps (measured, not kept).
 *
 * Time between steps comes from `Clock` (TestClock drives it in tests); the lease's own times are
 * the database's.
 */
import { randomUUID } from "node:crypto"
import { hostname } from "node:os"
import { Cause, Clock, Duration, Effect, Layer, Metric, Queue, Schedule } from "effect"
import { SqlClient, type Statement } from "effect/sql"
import { NotificationStream } from "../platform/NotificationStream.ts"
import { appendedChannel, appendWidth } from "./EventLog.ts"
import * as EventLogMetrics from "./EventLogMetrics.ts"
import * as SequencerBatch from "./SequencerBatch.ts"
import * as SequencerBatchInPlace from "./SequencerBatchInPlace.ts"
import * as SequencerLease from "./SequencerLease.ts"
import * as UnsequencedBounds from "./UnsequencedBounds.ts"

export interface SequencerOptions {
  /**
   * Where the appends it numbers wait: `pending` in `event_log_pending` (`EventLog.layerPostCommit`),
   * or `in_place` in `event_log` (`EventLog.layerPostCommitInPlace`). Default `pending`.
   */
  readonly placement?: "in_place" | "pending"
  /**
   * In place: how often a batch reads every leaf of the log rather than within its bounds, for
   * appends a server clock stepped back by more than `UnsequencedBounds.margin` would hide.
   * Default 10 minutes.
   */
  readonly sweepInterval?: Duration.Input
  /** This process's name in `event_sequencer.holder`. Default: host, pid and a random suffix. */
  readonly holder?: string
  /** Appends per batch. Default 1000. */
  readonly batchSize?: number
  /** Pause of the holder after a batch that found nothing. Default 5 ms. */
  readonly pollInterval?: Duration.Input
  /**
   * Pause after a batch that numbered appends but less than a full batch: appends are coming, so
   * the next batch comes sooner (capped by `pollInterval`). Default 1 ms.
   */
  readonly busyInterval?: Duration.Input
  /** How long a lease lasts unrenewed: a dead holder is replaced within it. Default 5 seconds. */
  readonly lease?: Duration.Input
  /** How often a standby tries to take the lease, and a failed step is retried. Default 1 second. */
  readonly standbyInterval?: Duration.Input
  /** How often the gauges are sampled. Default 10 seconds. */
  readonly sampleInterval?: Duration.Input
  /** Observes every step's result, e.g. for tests that wait on a batch. */
  readonly onStep?: (step: Step) => Effect.Effect<void>
  /**
   * Runs inside each batch's transaction after the move and before COMMIT (the batch is then a
   * transaction of its own rather than one autocommitted statement): for tests that kill a holder
   * mid-batch.
   */
  readonly inBatch?: (batch: SequencerBatch.BatchResult) => Effect.Effect<void>
}

export type Step =
  | { readonly _tag: "Acquired"; readonly holder: string }
  | { readonly _tag: "NotAcquired" }
  | { readonly _tag: "Renewed" }
  | { readonly _tag: "Lost" }
  | {
      readonly _tag: "Batch"
      readonly appends: number
      readonly events: number
      readonly firstSeq: bigint | null
      readonly lastSeq: bigint | null
    }
  | { readonly _tag: "Failed" }

/** How far past the server's estimated time the in-place read looks (a server clock stepped ahead). */
const aheadMargin = Duration.toMillis(Duration.hours(1))

type State = { readonly _tag: "Standby" } | { readonly _tag: "Leading"; readonly renewAt: number }

const millisOf = (d: Duration.Input | undefined, fallback: Duration.Duration) =>
  Duration.toMillis(d === undefined ? fallback : Duration.fromInputUnsafe(d))

/**
 * The transactions holding an insert lock on `relations` with an xid: the open appenders. Their
 * start time needs the same role or pg_read_all_stats (else they count as none).
 */
const openAppendAge = (sql: SqlClient.SqlClient, relations: Statement.Fragment) => sql`
  coalesce((
    SELECT extract(epoch FROM clock_timestamp() - min(a.xact_start))
    FROM pg_locks AS l JOIN pg_stat_activity AS a ON a.pid = l.pid
    WHERE l.locktype = 'relation' AND l.mode = 'RowExclusiveLock' AND l.granted
      AND l.relation IN (${relations}) AND a.backend_xid IS NOT NULL AND a.pid <> pg_backend_pid()
  ), 0)::float8`

/** The gauges of appends waiting in `event_log_pending`. */
const pendingGauges = (sql: SqlClient.SqlClient) =>
  sql<{ pending: number; pendingAge: number; openAge: number }>`
    SELECT (SELECT count(*) FROM (SELECT FROM event_log_pending LIMIT 100000) AS p)::int AS pending,
           coalesce(extract(epoch FROM clock_timestamp() - (SELECT min(appended_at) FROM event_log_pending)), 0)::float8
             AS "pendingAge",
           ${openAppendAge(sql, sql`SELECT 'event_log_pending'::regclass`)} AS "openAge"`

/**
 * The gauges of appends waiting in place: within the bounds the last batch kept, planned with them
 * (unprepared) so the read prunes to the leaves that can hold them.
 */
const inPlaceGauges = Effect.fnUntraced(function* (sql: SqlClient.SqlClient) {
  const [bounds] = yield* sql<{ from: string; below: bigint; until: string }>`
    SELECT unsequenced_from::text AS "from", -((unsequenced_after + 1) * ${appendWidth}) + 1 AS below,
           (clock_timestamp() + interval '1 hour')::text AS until
    FROM event_seq`
  if (bounds === undefined) return []
  return yield* sql<{ pending: number; pendingAge: number; openAge: number }>`
    WITH waiting AS MATERIALIZED (
      SELECT occurred_at AS at FROM event_log
      WHERE seq < ${bounds.below} AND occurred_at >= ${bounds.from}::timestamptz
        AND occurred_at <= ${bounds.until}::timestamptz
      LIMIT 100000
    )
    SELECT (SELECT count(*) FROM waiting)::int AS pending,
           coalesce(extract(epoch FROM clock_timestamp() - (SELECT min(at) FROM waiting)), 0)::float8 AS "pendingAge",
           ${openAppendAge(sql, sql`SELECT relid FROM pg_partition_tree('event_log') WHERE isleaf`)} AS "openAge"`
    .unprepared
})

/** Reads the sequencing gauges of `placement` (default `pending`) from the database. */
export const sampleGauges = Effect.fn("Sequencer.sampleGauges")(function* (
  placement: NonNullable<SequencerOptions["placement"]> = "pending",
) {
  const sql = yield* SqlClient.SqlClient
  const [row] = yield* placement === "in_place" ? inPlaceGauges(sql) : pendingGauges(sql)
  if (row === undefined) return
  yield* Metric.update(EventLogMetrics.unsequenced, row.pending)
  yield* Metric.update(EventLogMetrics.unsequencedAge, Math.max(0, row.pendingAge))
  yield* Metric.update(EventLogMetrics.openAppendAge, Math.max(0, row.openAge))
})

/** Builds the sequencer's loop; `layer` runs it for the layer's lifetime. */
export const make = Effect.fnUntraced(function* (options: SequencerOptions = {}) {
  const sql = yield* SqlClient.SqlClient
  const holder = options.holder ?? `${hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`
  const batchSize = options.batchSize ?? 1000
  const leaseMillis = millisOf(options.lease, Duration.seconds(5))
  const pollMillis = millisOf(options.pollInterval, Duration.millis(5))
  const standbyMillis = millisOf(options.standbyInterval, Duration.seconds(1))
  const onStep = options.onStep ?? (() => Effect.void)
  // Appends that committed through `appendAfter` wake the holder (`wake`); it polls as well.
  const wakeups = yield* Queue.sliding<void>(1)
  const wake = Queue.offer(wakeups, undefined).pipe(Effect.asVoid)
  const busyMillis = Math.min(pollMillis, millisOf(options.busyInterval, Duration.millis(1)))
  const pauseFor = (millis: number) => Effect.raceFirst(Effect.sleep(Duration.millis(millis)), Queue.take(wakeups))
  const idlePause = pauseFor(pollMillis)
  const busyPause = pauseFor(busyMillis)
  const sweepMillis = millisOf(options.sweepInterval, Duration.minutes(10))
  const provide = Effect.provideService(SqlClient.SqlClient, sql)
  const inTransaction = <A extends SequencerBatch.BatchResult, E>(run: Effect.Effect<A, E, SqlClient.SqlClient>) =>
    options.inBatch === undefined ? run : sql.withTransaction(Effect.tap(run, options.inBatch))

  // In place: where the holder reads (see UnsequencedBounds), from what the last holder kept.
  let frontier = UnsequencedBounds.make({ from: undefined, after: 0n })
  let sweptAt = 0
  // The server's time as last seen, and this process's then: the read's upper bound is the
  // server's time now, estimated, plus `aheadMargin` (leaves further ahead hold nothing waiting).
  let serverTime = { at: 0, seen: 0 }
  const startFrontier = Effect.gen(function* () {
    const [kept] = yield* sql<{ from: Date | null; after: bigint; now: Date }>`
      SELECT CASE WHEN isfinite(unsequenced_from) THEN unsequenced_from END AS "from",
             unsequenced_after AS after, clock_timestamp() AS now
      FROM event_seq`
    frontier = UnsequencedBounds.make({ from: kept?.from ?? undefined, after: kept?.after ?? 0n })
    sweptAt = yield* Clock.currentTimeMillis
    serverTime = { at: kept?.now.getTime() ?? 0, seen: sweptAt }
  })
  const inPlace = Effect.gen(function* () {
    const now = yield* Clock.currentTimeMillis
    const sweep = now - sweptAt >= sweepMillis
    if (sweep) sweptAt = now
    const bounds = sweep ? { ...frontier.bounds(), from: undefined } : frontier.bounds()
    const until = sweep ? undefined : new Date(serverTime.at + (now - serverTime.seen) + aheadMargin)
    const { marks, ...result } = yield* inTransaction(SequencerBatchInPlace.run(holder, batchSize, bounds, until))
    if (result.leased) {
      frontier.observe(marks)
      serverTime = { at: marks.at.getTime(), seen: yield* Clock.currentTimeMillis }
    }
    return { result, full: marks.full }
  })
  // Full: another batch waits already, so the holder goes on at once.
  const batch =
    options.placement !== "in_place"
      ? Effect.map(inTransaction(SequencerBatch.run(holder, batchSize)), (result) => ({
          result,
          full: result.appends >= batchSize,
        }))
      : inPlace
  const leading = Effect.map(
    Clock.currentTimeMillis,
    (now): State => ({ _tag: "Leading", renewAt: now + leaseMillis / 3 }),
  )
  const setLeading = (on: boolean) => Metric.update(EventLogMetrics.sequencerLeading, on ? 1 : 0)

  const standby = Effect.gen(function* () {
    if (yield* provide(SequencerLease.acquire(holder, leaseMillis))) {
      if (options.placement === "in_place") yield* startFrontier
      yield* setLeading(true)
      yield* onStep({ _tag: "Acquired", holder })
      return yield* leading
    }
    yield* onStep({ _tag: "NotAcquired" })
    yield* Effect.sleep(Duration.millis(standbyMillis))
    return { _tag: "Standby" } as State
  })

  const lost = Effect.gen(function* () {
    yield* setLeading(false)
    yield* onStep({ _tag: "Lost" })
    return { _tag: "Standby" } as State
  })

  const lead = (state: Extract<State, { _tag: "Leading" }>) =>
    Effect.gen(function* () {
      let next: State = state
      if ((yield* Clock.currentTimeMillis) >= state.renewAt) {
        if (!(yield* provide(SequencerLease.acquire(holder, leaseMillis)))) return yield* lost
        yield* onStep({ _tag: "Renewed" })
        next = yield* leading
      }
      const { result, full } = yield* provide(batch)
      if (!result.leased) return yield* lost
      if (result.events > 0) {
        yield* Metric.update(EventLogMetrics.sequencedEvents, result.events)
        yield* Metric.update(EventLogMetrics.sequencerBatches, 1)
      }
      yield* onStep({ _tag: "Batch", ...result })
      if (!full) yield* result.appends > 0 ? busyPause : idlePause
      return next
    })

  const step = (state: State): Effect.Effect<State> =>
    (state._tag === "Standby" ? standby : lead(state)).pipe(
      Effect.catchCause((cause) =>
        Cause.hasInterruptsOnly(cause)
          ? Effect.interrupt
          : Effect.logError("sequencer: step failed; retrying", cause).pipe(
              Effect.andThen(onStep({ _tag: "Failed" })),
              Effect.andThen(Effect.sleep(Duration.millis(standbyMillis))),
              Effect.as(state),
            ),
      ),
    )

  const loop = Effect.gen(function* () {
    let state: State = { _tag: "Standby" }
    for (;;) state = yield* step(state)
  })
  const release = provide(SequencerLease.release(holder)).pipe(
    Effect.andThen(setLeading(false)),
    Effect.catchCause((cause) => Effect.logWarning("sequencer: could not give the lease up; it expires", cause)),
  )
  return { holder, loop, release, wake }
})

/**
 * One line at start when this role cannot see other roles' transactions in `pg_stat_activity`
 * (neither superuser nor member of `pg_read_all_stats`, as on a managed service): the open-append
 * gauge then counts only this role's, which is all of them unless producers use another role.
 */
const sayWhatStatsHide = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const [row] = yield* sql<{ sees: boolean }>`
    SELECT rolsuper OR pg_has_role(current_user, 'pg_read_all_stats', 'USAGE') AS sees
    FROM pg_roles WHERE rolname = current_user`
  if (row?.sees !== false) return
  yield* Effect.logInfo(
    "without pg_read_all_stats, bothy.event.log.open_append_age counts only this role's open appends (grant it when producers append with another role)",
  )
}).pipe(Effect.catchCause((cause) => Effect.logWarning("sequencer: cannot read this role's rights", cause)))

/**
 * Runs a sequencer for the layer's lifetime: the `post_commit` mode needs at least one somewhere
 * (any number may run; one leads). Without one, appends commit and wait, unnumbered and unread.
 */
export const layer = (options: SequencerOptions = {}) =>
  Layer.effectDiscard(
    Effect.gen(function* () {
      const sequencer = yield* make(options)
      yield* sayWhatStatsHide
      const notifications = yield* Effect.serviceOption(NotificationStream)
      if (notifications._tag === "Some") yield* notifications.value.subscribe(appendedChannel, () => sequencer.wake)
      yield* Effect.addFinalizer(() => sequencer.release)
      yield* sequencer.loop.pipe(Effect.forkScoped)
      yield* sampleGauges(options.placement).pipe(
        Effect.catchCause((cause) => Effect.logWarning("sequencer: gauge sampling failed", cause)),
        Effect.repeat(Schedule.spaced(options.sampleInterval ?? Duration.seconds(10))),
        Effect.forkScoped,
      )
    }).pipe(Effect.annotateLogs({ service: "sequencer" })),
  )
