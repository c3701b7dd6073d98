/**
 * A fresh database per test file (or per `layer(...)` block), cloned from the migrated template the
 * global setup made (or empty, for tests of the migrations), and dropped when the layer closes.
 *
 * Databases are made and dropped over the direct connection (`pgAdminUrl`); the code under test
 * connects where the run says (`pgUrl`: through a pooler when the run goes through one, and then,
 * as `Database.layer` would, with prepared statements off and sessions of their own over the
 * direct URL).
 */
import { randomUUID } from "node:crypto"
import { PgClient } from "@effect/sql-pg"
import { Context, Effect, Layer, Option, Redacted } from "effect"
import { inject } from "vitest"
import * as DatabaseSessions from "../../src/platform/DatabaseSessions.ts"
import { withDatabase } from "../../testkit/DatabaseUrl.ts"
import * as MigratedDatabase from "../../testkit/MigratedDatabase.ts"

export class TestDatabase extends Context.Service<
  TestDatabase,
  {
    readonly name: string
    /** Full URL with credentials, for child processes and second clients (through the run's pooler, if any). */
    readonly url: string
    /** The same database's URL, direct to the server. */
    readonly directUrl: string
  }
>()("test/TestDatabase") {}

/** Runs one statement on the maintenance database. */
export const adminSql = (statement: string) => MigratedDatabase.adminStatement(inject("pgAdminUrl"), statement)

/** The URL the code under test uses for database `name`. */
export const codeUrl = (name: string) => withDatabase(inject("pgUrl"), name)

/** The URL of database `name`, direct to the server. */
export const directUrl = (name: string) => withDatabase(inject("pgAdminUrl"), name)

/** Whether the run goes through a pooler. */
export const pooled = () => inject("pgUrl") !== inject("pgAdminUrl")

/**
 * A pool for the code under test on database `name`, with `DatabaseSessions` as `Database.layer`
 * would find it (through a pooler: prepared statements off, sessions over the direct URL).
 */
export const codePool = (name: string, options: Partial<PgClient.PgPoolConfig> = {}) => {
  const url = codeUrl(name)
  const pool = PgClient.layer({ url: Redacted.make(url), maxConnections: 10, prepare: !pooled(), ...options })
  if (!pooled()) return pool
  const sessions = Effect.map(
    DatabaseSessions.detect({ url: Redacted.make(url) }, new URL(url).host),
    (route): DatabaseSessions.DatabaseSessions => ({
      route,
      session: Option.some({ url: Option.some(Redacted.make(directUrl(name))), variable: "DATABASE_DIRECT_URL" }),
    }),
  )
  return Layer.merge(pool, Layer.effect(DatabaseSessions.DatabaseSessions, sessions))
}

const fresh = (template: string | undefined, options: Partial<PgClient.PgPoolConfig>) =>
  Layer.unwrap(
    Effect.gen(function* () {
      const name = `t_${randomUUID().replaceAll("-", "")}`
      const from = template === undefined ? "" : ` TEMPLATE "${template}"`
      yield* Effect.acquireRelease(adminSql(`CREATE DATABASE "${name}"${from}`), () =>
        adminSql(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`).pipe(Effect.ignore),
      )
      return Layer.merge(
        codePool(name, options),
        Layer.succeed(TestDatabase, TestDatabase.of({ name, url: codeUrl(name), directUrl: directUrl(name) })),
      )
    }),
  ).pipe(Layer.orDie)

/** Clones the template into a new database; provides a pool on it and `TestDatabase`. */
export const layer = (options: Partial<PgClient.PgPoolConfig> = {}) => fresh(inject("pgTemplate"), options)

/**
 * A new database with no schema at all, for tests that prove the migrations themselves (as a host
 * app runs them); provides a pool on it and `TestDatabase`.
 */
export const layerEmpty = (options: Partial<PgClient.PgPoolConfig> = {}) => fresh(undefined, options)

/**
 * A second pool on the test's database, independent of any transaction the test fiber is in;
 * closed with the test's scope.
 */
export const otherClient = Effect.flatMap(TestDatabase, ({ name }) =>
  Layer.build(codePool(name, { maxConnections: 4 })),
).pipe(Effect.map(Context.get(PgClient.PgClient)))

/** A pool on `url` (a database of the test's, perhaps through a pooler). */
export const poolOn = (url: string, options: Partial<PgClient.PgPoolConfig> = {}) =>
  PgClient.layer({ url: Redacted.make(url), maxConnections: 4, ...options })

/**
 * A database cloned from the migrated template, dropped with the scope, for tests whose child
 * processes connect by URL: its name and that URL.
 */
export const cloneForProcesses = (prefix: string) =>
  Effect.gen(function* () {
    const name = `t_${prefix}_${process.pid}_${randomUUID().slice(0, 8)}`
    yield* Effect.acquireRelease(adminSql(`CREATE DATABASE "${name}" TEMPLATE "${inject("pgTemplate")}"`), () =>
      adminSql(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`).pipe(Effect.ignore),
    )
    return { name, url: codeUrl(name), directUrl: directUrl(name) }
  })

/**
 * A database cloned from the migrated template for tests of a restore, with its backup: `backUp`
 * copies it (no connection may be open on it), `restore` drops it and makes it again from that copy.
 * Both are dropped with the scope.
 */
export const restorable = (prefix: string) =>
  Effect.gen(function* () {
    const name = `t_${prefix}_${randomUUID().replaceAll("-", "")}`
    const backup = `${name}_backup`
    yield* Effect.acquireRelease(adminSql(`CREATE DATABASE "${name}" TEMPLATE "${inject("pgTemplate")}"`), () =>
      Effect.all([
        adminSql(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`),
        adminSql(`DROP DATABASE IF EXISTS "${backup}" WITH (FORCE)`),
      ]).pipe(Effect.ignore),
    )
    return {
      name,
      backUp: adminSql(`CREATE DATABASE "${backup}" TEMPLATE "${name}"`),
      restore: Effect.all([
        adminSql(`DROP DATABASE "${name}" WITH (FORCE)`),
        adminSql(`CREATE DATABASE "${name}" TEMPLATE "${backup}"`),
      ]),
    }
  })
