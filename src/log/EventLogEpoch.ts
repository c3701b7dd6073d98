/**
 * The log epoch (`event_seq.epoch`): the part of every id a receiver sees that tells apart the
 * histories a restore makes. After a database restore the seqs past the restored head are numbered
 * again and come back with other content, so `bothy restore finalize` starts a new epoch and every
 * id built from a seq or a per-subscription number carries it.
 *
 * What it keeps true: an epoch is never given twice, across any number of restores, even two
 * restores of the same backup. `epoch + 1` alone would not do: the counter row is restored with
 * the rest, so each restore of one backup would start the same next epoch, and the ids of the
 * history the first restore began would come again. A new epoch is therefore at least the number
 * of seconds since `epochClockBase` (from `Clock`), and above the current one: two restores of one
 * backup finalized a second apart or more get different epochs, and epochs only grow. (An
 * `integer` column: seconds since 2026 fit until 2094.)
 *
 * The counter row is updated under the append lock (`appendLockKey`), like every other update of
 * it, so the head read with the new epoch cannot move before the caller's transaction commits, and
 * every append (or sequencer batch) after that commit takes the new epoch.
 */
import { Clock, Effect } from "effect"
import { SqlClient } from "effect/sql"
import { appendLockKey } from "./EventLog.ts"

/** Where epoch seconds count from: 2026-01-01T00:00:00Z. */
export const epochClockBase = Date.UTC(2026, 0, 1)

/** The least epoch `start` may give at `now` (Unix milliseconds). */
export const clockFloor = (now: number) => Math.max(1, Math.floor((now - epochClockBase) / 1000))

export interface EpochStarted {
  /** The head of the log when the epoch changed (the restored head, after a restore). */
  readonly head: bigint
  readonly previous: number
  readonly epoch: number
}

/** Starts a new epoch; call it inside the transaction whose commit it belongs to. */
export const start = Effect.fn("EventLogEpoch.start")(function* () {
  const sql = yield* SqlClient.SqlClient
  const floor = clockFloor(yield* Clock.currentTimeMillis)
  // The previous epoch comes from the row locked before the update (RETURNING's `old.` needs 18):
  // `FOR UPDATE` reads the newest committed row, not the statement's snapshot, which is older than
  // the advisory lock's grant.
  const [row] = yield* sql<EpochStarted>`
    WITH turn AS MATERIALIZED (
      SELECT pg_advisory_xact_lock(${appendLockKey})
    ), current AS MATERIALIZED (
      SELECT event_seq.epoch FROM event_seq, turn FOR UPDATE OF event_seq
    )
    UPDATE event_seq SET epoch = greatest(current.epoch + 1, ${floor}::int) FROM current
    RETURNING event_seq.value AS head, current.epoch AS previous, event_seq.epoch AS epoch`
  if (row === undefined) return yield* Effect.die("event_seq has no row: the migrations were not applied")
  return row
})

/**
 * Appends committed but not numbered yet (`post_commit` sequencing: rows of `event_log_pending`,
 * and appends waiting in `event_log` when sequenced in place; 0 without that table). The sequencer
 * numbers them after the head, in the epoch current by then. A rare operator's count: it reads
 * every leaf of the log.
 */
export const unsequencedAppends = Effect.fn("EventLogEpoch.unsequencedAppends")(function* () {
  const sql = yield* SqlClient.SqlClient
  const [table] = yield* sql<{ present: boolean }>`SELECT to_regclass('event_log_pending') IS NOT NULL AS present`
  if (table?.present !== true) return 0
  const [row] = yield* sql<{ n: number }>`
    SELECT ((SELECT count(*) FROM event_log_pending)
      + (SELECT count(DISTINCT append_id) FROM event_log WHERE seq < 0))::int AS n`
  return row?.n ?? 0
})

/**
 * The holder of the `post_commit` sequencer's lease while it is live (none without that mode's
 * `event_sequencer` table): a sequencer numbering appends right now.
 */
export const liveSequencer = Effect.fn("EventLogEpoch.liveSequencer")(function* () {
  const sql = yield* SqlClient.SqlClient
  const [table] = yield* sql<{ present: boolean }>`SELECT to_regclass('event_sequencer') IS NOT NULL AS present`
  if (table?.present !== true) return undefined
  const [row] = yield* sql<{ holder: string; expiresAt: Date }>`
    SELECT holder, expires_at AS "expiresAt" FROM event_sequencer
    WHERE holder IS NOT NULL AND expires_at > clock_timestamp()`
  return row
})

/**
 * The current epoch, read under the append lock (taken for the caller's transaction): no epoch
 * change can commit between this read and the caller's commit.
 */
export const currentLocked = Effect.fn("EventLogEpoch.currentLocked")(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`SELECT pg_advisory_xact_lock(${appendLockKey})`
  // A statement after the lock's grant: its snapshot sees any epoch change committed before.
  const [row] = yield* sql<{ epoch: number }>`SELECT epoch FROM event_seq`
  if (row === undefined) return yield* Effect.die("event_seq has no row: the migrations were not applied")
  return row.epoch
})
