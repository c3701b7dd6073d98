/**
 * Events with explicit times, for tests of retention: appended through the counter as
 * `EventLog.append` does (same lock, gapless, `last_at` kept), but at the times given, which must
 * not decrease. The day partitions for those times must exist (`days`).
 */
import { Duration, Effect } from "effect"
import { SqlClient } from "effect/sql"
import { appendLockKey } from "../../src/log/EventLog.ts"

export const dayMillis = Duration.toMillis(Duration.days(1))

/** Creates the day partitions from `from` through `days` days later. */
export const days = (from: number, days: number) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) =>
      sql`SELECT event_log_ensure_partitions(${new Date(from).toISOString()}::timestamptz, make_interval(days => ${days}))`,
  )

/** Appends one event per time, in `space`; returns their seqs. */
export const appendAt = (times: ReadonlyArray<number>, space = "old") =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const rows = yield* sql<{ seq: bigint }>`
      WITH turn AS MATERIALIZED (
        SELECT pg_advisory_xact_lock(${appendLockKey})
      ), t AS (
        SELECT at, n FROM unnest(${times.map((t) => new Date(t).toISOString())}::timestamptz[]) WITH ORDINALITY AS t(at, n)
      ), head AS (
        UPDATE event_seq SET value = value + (SELECT count(*) FROM t), last_at = greatest(last_at, (SELECT max(at) FROM t))
        FROM turn RETURNING value - (SELECT count(*) FROM t) AS base, epoch
      )
      INSERT INTO event_log (seq, epoch, occurred_at, space_id, type, actor, payload)
      SELECT head.base + t.n, head.epoch, t.at, ${space}, 'item.created', 'someone', '{}'::jsonb
      FROM head, t
      RETURNING seq`
    return rows.map((r) => r.seq).sort((a, b) => (a < b ? -1 : 1))
  })
