/**
 * Wakes the `post_commit` sequencer once appends committed, without giving back what the mode
 * exists for. A NOTIFY inside the producer's transaction would take PostgreSQL's notify lock at its
 * commit and hold it through the commit, so every producer's commit would queue behind the others'
 * again. Here the NOTIFY is a statement of its own after the commit, on another connection of the
 * pool, never awaited by the producer; only these one-statement transactions take the lock.
 *
 * Only a commit after a quiet spell (`quiet` since this process's previous one) sends it: that is
 * when the sequencer is likely asleep in its poll. Under a stream of commits it is busy anyway, and
 * there the NOTIFYs cost more than they saved: sent for every commit, or even one per 5 ms, they
 * halved the appends per second of 8 and 16 producers in `npm run bench -- append` (they take a
 * connection from the producers' pool, queue on the notify lock, and wake the sequencer into
 * batches of one or two appends). At most one is in flight. A lost wake-up costs only latency: the
 * sequencer polls as well.
 */
import { Clock, Duration, Effect } from "effect"
import type { SqlClient } from "effect/sql"

export interface AppendWake {
  /** Asks for a wake-up of the sequencer; returns at once. */
  readonly wake: Effect.Effect<void>
}

/** How long this process's appends must have paused for a commit to wake the sequencer. */
export const defaultQuiet = Duration.millis(5)

/** A waker for the scope, sending on `channel` through `sql` after a pause of `quiet`. */
export const make = Effect.fnUntraced(function* (
  sql: SqlClient.SqlClient,
  channel: string,
  quiet: Duration.Duration = defaultQuiet,
) {
  const scope = yield* Effect.scope
  const quietMillis = Duration.toMillis(quiet)
  let inFlight = false
  let lastCommit = Number.NEGATIVE_INFINITY
  const send = sql`SELECT pg_notify(${channel}, '')`.pipe(
    Effect.ignore,
    Effect.ensuring(Effect.sync(() => (inFlight = false))),
  )
  const wake = Effect.flatMap(Clock.currentTimeMillis, (now) => {
    const afterQuiet = now - lastCommit >= quietMillis
    lastCommit = now
    if (!afterQuiet || inFlight) return Effect.void
    inFlight = true
    return Effect.asVoid(Effect.forkIn(send, scope))
  })
  return { wake } satisfies AppendWake
})
