/**
 * The time window a one-statement round gives its read as parameters, so that PostgreSQL plans
 * the read over the hour leaves that can hold the batch only: from the cursor's `last_at` as last
 * seen (it never decreases, so an old sight is still a lower bound) to the database's clock as last
 * seen, moved on by this process's clock, plus a minute. The statement's exact bounds, the locked
 * cursor's time and the head's, are values of other relations: PostgreSQL prunes with those only
 * while the statement runs, after it has planned and set up every leaf (with 30 days of hour
 * leaves, most of a round's time).
 *
 * Both ends are hints, never trusted: the statement still bounds the read exactly by the cursor
 * and the head. A window too narrow (the database's clock stepped ahead, a cursor moved back by
 * hand) leaves a hole in what the read returns, and the round hands over to the transactional
 * round, which reads its bounds first; the sight the round returns puts the window right.
 */
import { Clock, Effect, Ref } from "effect"
import { SqlClient } from "effect/sql"

export interface Window {
  /** Null for a cursor that has read nothing yet. */
  readonly since: Date | null
  readonly until: Date
}

/** What a round saw: the cursor's time after it (null before its first event), and the database's clock. */
export interface Sight {
  readonly cursorAt: Date | null
  readonly dbNow: Date
}

/** The SQL for a cursor's time `at` as a `Sight` takes it: null while it is `-infinity`. */
export const cursorAtSql = (sql: SqlClient.SqlClient, at: string) =>
  sql.literal(`CASE WHEN isfinite(${at}) THEN ${at} END`)

/** How far past the database's clock, as estimated, a window reaches (the drainer's as well). */
export const aheadMillis = 60_000

export interface ReadWindow {
  /** The window for the next read of consumer `name`; the first one looks the cursor up. */
  readonly next: (name: string) => Effect.Effect<Window | undefined, never, SqlClient.SqlClient>
  readonly saw: (sight: Sight) => Effect.Effect<void>
}

export const make: Effect.Effect<ReadWindow> = Effect.gen(function* () {
  const seen = yield* Ref.make<{ readonly cursorAt: Date | null; readonly offsetMillis: number } | undefined>(undefined)
  const saw = (sight: Sight) =>
    Effect.flatMap(Clock.currentTimeMillis, (now) =>
      Ref.set(seen, { cursorAt: sight.cursorAt, offsetMillis: sight.dbNow.getTime() - now }),
    )
  const lookUp = (name: string) =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const [row] = yield* sql<Sight>`
        SELECT ${cursorAtSql(sql, "last_at")} AS "cursorAt", clock_timestamp() AS "dbNow" FROM event_consumer_cursors WHERE name = ${name}`
      if (row !== undefined) yield* saw(row)
    }).pipe(Effect.ignore)
  const next = (name: string) =>
    Effect.gen(function* () {
      if ((yield* Ref.get(seen)) === undefined) yield* lookUp(name)
      const sight = yield* Ref.get(seen)
      if (sight === undefined) return undefined
      const now = yield* Clock.currentTimeMillis
      return { since: sight.cursorAt, until: new Date(now + sight.offsetMillis + aheadMillis) } satisfies Window
    })
  return { next, saw }
})
