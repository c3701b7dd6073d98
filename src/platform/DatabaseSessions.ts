/**
 * Where the work that needs a database session of its own goes, when `DATABASE_URL` may lead
 * through a pooler (PgBouncer, Supavisor, RDS Proxy, pgcat).
 *
 * A transaction pooler hands each transaction (each statement outside one) to whichever server
 * connection is free, so nothing outlives a transaction: not a LISTEN, a session `SET`, a prepared
 * statement, an advisory lock, or the backend's pid. bothy keeps everything else to single
 * transactions, and sends the few things that need a session (LISTEN, retention's detaches under a
 * session timeout) over `DATABASE_DIRECT_URL` when it is given. Without one, behind a transaction
 * pooler, those fail with `PoolerSessionOnly` naming the pooler and the variable (LISTEN instead
 * gives way to polling, and says so), never with a bare `Query failed`.
 *
 * How `DATABASE_URL` reaches the server (`Route`) is found at start, on two connections of its own:
 *
 *   A: pid  ──> a1          the pid PostgreSQL reports is not the one the connection got at its
 *                           start-up (a pooler's key): pooled, else direct
 *   B: BEGIN; pid ──> b     b = a1: B got the server A had while A stays connected, so A's
 *   A: pid  ──> a2          session was not A's alone: a transaction pooler; a2 ≠ a1 likewise.
 *   B: ROLLBACK             Otherwise a session pooler (A kept its server while B held another).
 *
 * PgBouncer hands out its most recently used idle server first, so B gets A's in transaction mode.
 */

import type { ConnectionOptions } from "node:tls"
import { PgConnection } from "@effect/sql-pg"
import { Context, Effect, Option, type Redacted, Schema } from "effect"
import type { SqlError } from "effect/sql/SqlError"

/** How `DATABASE_URL` reaches the server. */
export type Route =
  | { readonly _tag: "Direct" }
  /** A pooler in `mode` at `at` (host and port, no credentials). */
  | { readonly _tag: "Pooler"; readonly mode: "session" | "transaction"; readonly at: string }

/** A session of its own: the connection settings (none: the pool's own) and the variable they come from. */
export interface SessionTarget {
  readonly url: Option.Option<Redacted.Redacted>
  /** The TLS options `url`'s libpq parameters ask for (`DatabaseTls`). */
  readonly ssl?: ConnectionOptions | undefined
  /** What its connections send at start-up besides (the `search_path` of bothy's schema, `DatabaseSchema`). */
  readonly startupParameters?: Readonly<Record<string, string>> | undefined
  readonly variable: string
}

export interface DatabaseSessions {
  readonly route: Route
  /** Where a session of its own goes: none behind a transaction pooler without a direct URL. */
  readonly session: Option.Option<SessionTarget>
}

/** The variable of the URL for sessions of their own. */
export const directVariable = "DATABASE_DIRECT_URL"

/**
 * Provided by `Database.layer`; a host app or a test that provides only a pool gets the default:
 * that pool reaches the server directly.
 */
export const DatabaseSessions = Context.Reference<DatabaseSessions>("bothy/DatabaseSessions", {
  defaultValue: () => ({
    route: { _tag: "Direct" },
    session: Option.some({ url: Option.none(), variable: "DATABASE_URL" }),
  }),
})

export class PoolerSessionOnly extends Schema.TaggedError<PoolerSessionOnly>()("PoolerSessionOnly", {
  /** What needed the session (`retention's DETACH PARTITION ... CONCURRENTLY`). */
  what: Schema.String,
  /** The pooler, host and port. */
  pooler: Schema.String,
  /** The variable to set. */
  variable: Schema.String,
}) {
  override get message() {
    return (
      `${this.what} needs a database session of its own, which the transaction pooler at ${this.pooler} ` +
      `(DATABASE_URL) does not keep: set ${this.variable} to a direct connection to the server`
    )
  }
}

/**
 * Where `what`, which needs a session of its own, goes; `PoolerSessionOnly` when nowhere.
 * @internal
 */
export const session = (what: string) =>
  Effect.flatMap(DatabaseSessions, ({ route, session }) =>
    Option.isSome(session)
      ? Effect.succeed(session.value)
      : Effect.fail(
          new PoolerSessionOnly({
            what,
            pooler: route._tag === "Pooler" ? route.at : "DATABASE_URL",
            variable: directVariable,
          }),
        ),
  )

/**
 * Runs `statements` in order, each alone, on a connection of its own to `url`, closed afterwards:
 * session settings and then the statement they are for, which nobody else's work can then meet.
 * @internal
 */
export const runOnOwnSession = (
  url: Redacted.Redacted,
  target: Pick<SessionTarget, "ssl" | "startupParameters">,
  statements: ReadonlyArray<string>,
) =>
  Effect.scoped(
    Effect.gen(function* () {
      const { ssl, startupParameters } = target
      const connection = yield* PgConnection.make({
        url,
        applicationName: "bothy-session",
        ...(ssl && { ssl }),
        ...(startupParameters && { startupParameters }),
      })
      for (const statement of statements) yield* connection.query(statement, [], false)
    }),
  )

const pid = (connection: PgConnection.PgConnection) =>
  Effect.map(connection.query("SELECT pg_backend_pid() AS pid", [], false), (r) => Number(r.rows[0]?.pid))

/**
 * Finds how a connection made with `config` reaches the server (see the module header); `at` names it.
 * @internal
 */
export const detect = (config: PgConnection.Config, at: string): Effect.Effect<Route, SqlError> =>
  Effect.scoped(
    Effect.gen(function* () {
      const a = yield* PgConnection.make({ ...config, applicationName: "bothy-route" })
      const a1 = yield* pid(a)
      if (a1 === a.processId) return { _tag: "Direct" } as const
      const b = yield* PgConnection.make({ ...config, applicationName: "bothy-route" })
      const pinned = yield* b.pin
      yield* pinned.query("BEGIN", [], false)
      const shared = (yield* pid(pinned)) === a1 || (yield* pid(a)) !== a1
      yield* pinned.query("ROLLBACK", [], false)
      return { _tag: "Pooler", mode: shared ? "transaction" : "session", at } as const
    }),
  )

/**
 * The one line that says how `DATABASE_URL` reaches the server, and where sessions go.
 * @internal
 */
export const describe = ({ route, session }: DatabaseSessions): string => {
  if (route._tag === "Direct") return "DATABASE_URL reaches PostgreSQL directly"
  const where = Option.match(session, {
    onNone: () => `without ${directVariable}, what needs a session of its own (LISTEN, retention's detaches) is off`,
    onSome: (s) => `LISTEN and retention's detaches go over ${s.variable}`,
  })
  return `DATABASE_URL goes through a ${route.mode} pooler at ${route.at} (prepared statements off); ${where}`
}
