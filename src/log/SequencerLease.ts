/**
 * The sequencer's lease: the one `event_sequencer` row says who numbers appends (`holder`) and
 * until when (`expires_at`, database time, so workers on skewed clocks agree). A holder renews it
 * every third of the lease; anyone takes it once it has expired, so a dead holder is replaced
 * within a lease. A row lock, not a session advisory lock: those break behind poolers.
 *
 * The lease only keeps sequencers from working in vain. Correctness does not rest on it: every
 * batch updates the `event_seq` row, whose lock serializes any two batches that ever overlap.
 */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"
import * as SqlInterval from "../platform/SqlInterval.ts"

/**
 * Takes the lease when it is free or expired, or extends it when `holder` has it; true when
 * `holder` holds it afterwards. Two at once: the row lock makes the second see the first's lease.
 */
export const acquire = Effect.fnUntraced(function* (holder: string, leaseMillis: number) {
  const sql = yield* SqlClient.SqlClient
  const rows = yield* sql<{ holder: string }>`
    UPDATE event_sequencer
    SET acquired_at = CASE WHEN holder = ${holder} AND expires_at > clock_timestamp() THEN acquired_at
                           ELSE clock_timestamp() END,
        holder = ${holder},
        expires_at = clock_timestamp() + ${SqlInterval.millis(sql, leaseMillis)}
    WHERE holder = ${holder} OR holder IS NULL OR expires_at <= clock_timestamp()
    RETURNING holder`
  return rows.length > 0
})

/** Gives the lease up at once (a worker stopping), so a standby need not wait for it to expire. */
export const release = Effect.fnUntraced(function* (holder: string) {
  const sql = yield* SqlClient.SqlClient
  yield* sql`UPDATE event_sequencer SET expires_at = '-infinity' WHERE holder = ${holder}`
})
