/**
 * The retention lease (`retention_lease`, migration 0018): one retention run at a time across
 * every worker. Without it two runs refuse each other's detaches (PostgreSQL keeps one detach of a
 * table pending at a time) and each can skip the day the other did not take, which then waits an
 * hour for the next run. A row with an expiry in database time rather than a session advisory
 * lock, as for the sequencer: a dead holder's lease lapses, and nothing rests on a session that a
 * pooler may hand to someone else.
 *
 * The lease only spares runs from working in vain; correctness does not rest on it. A run that
 * outlives it (a stalled process) meets the refusals above, which it skips and reports.
 */
import { Duration, Effect, Schedule } from "effect"
import { SqlClient } from "effect/sql"
import * as SqlInterval from "../platform/SqlInterval.ts"

/** How long a lease lasts unless renewed. */
export const leaseTime = Duration.minutes(2)

/** How often the holder renews it, by `Clock`. */
const renewEvery = Duration.seconds(40)

const claim = (sql: SqlClient.SqlClient, holder: string) =>
  Effect.map(
    sql<{ holder: string }>`
      UPDATE retention_lease
      SET holder = ${holder}, expires_at = clock_timestamp() + ${SqlInterval.millis(sql, Duration.toMillis(leaseTime))}
      WHERE holder = ${holder} OR expires_at <= clock_timestamp()
      RETURNING holder`,
    (rows) => rows.length > 0,
  )

/**
 * Holds the lease for the scope: true when taken (renewed in the background and given up when the
 * scope closes), false when another run holds it.
 */
export const hold = Effect.fnUntraced(function* () {
  const sql = yield* SqlClient.SqlClient
  const holder = crypto.randomUUID()
  const taken = yield* Effect.acquireRelease(claim(sql, holder), (ok) =>
    ok ? Effect.ignore(sql`UPDATE retention_lease SET expires_at = '-infinity' WHERE holder = ${holder}`) : Effect.void,
  )
  if (taken)
    yield* claim(sql, holder).pipe(
      Effect.ignore,
      Effect.repeat(Schedule.spaced(renewEvery)),
      Effect.delay(renewEvery),
      Effect.forkScoped,
    )
  return taken
})
