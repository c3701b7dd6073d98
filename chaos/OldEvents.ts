/**
 * The past a chaos run needs for its gap: events dated days back, which bothy's own append never
 * writes (it dates events at the commit). They are appended as `EventLog.append` numbers events
 * (under its lock, through the counter, gapless, `last_at` kept), at the times given, which must
 * not decrease, into day partitions made for them. The retention tests use `appendAt` too
 * (test/support/OldEvents.ts; a tool imports nothing from test/, so it lives here).
 */
import { Duration, Effect } from "effect"
import { SqlClient } from "effect/sql"
import { appendLockKey } from "../src/log/EventLog.ts"

export const dayMillis = Duration.toMillis(Duration.days(1))

/** Appends one event per time, in `space`, by `actor`, into existing day partitions; returns their seqs. */
export const appendAt = (times: ReadonlyArray<number>, space: string, actor = "chaos") =>
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
      SELECT head.base + t.n, head.epoch, t.at, ${space}, 'item.created', ${actor}, '{}'::jsonb
      FROM head, t
      RETURNING seq`
    return rows.map((r) => r.seq).sort((a, b) => (a < b ? -1 : 1))
  })

/** Appends one event per time, in `space`, each into a day partition made for it; returns their seqs. */
export const append = (times: ReadonlyArray<number>, space: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const [first, last] = [new Date(times[0]!).toISOString(), new Date(times.at(-1)!).toISOString()]
    yield* sql`SELECT event_log_ensure_partitions(${first}::timestamptz, ${last}::timestamptz - ${first}::timestamptz)`
    return yield* appendAt(times, space)
  })
