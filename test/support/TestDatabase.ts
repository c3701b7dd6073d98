/**
 * A fresh database per test file (or per `layer(...)` block), cloned from the migrated template the
 * global setup made (or empty, for tests of the migrations), and dropped when the layer closes.
 */
import { randomUUID } from "node:crypto"
import { PgClient } from "@effect/sql-pg"
import { Context, Effect, Layer, Redacted } from "effect"
import { inject } from "vitest"
import { withDatabase } from "../../testkit/DatabaseUrl.ts"
import * as MigratedDatabase from "../../testkit/MigratedDatabase.ts"

export class TestDatabase extends Context.Service<
  TestDatabase,
  {
    readonly name: string
    /** Full URL with credentials, for child processes and second clients. */
    readonly url: string
  }
>()("test/TestDatabase") {}

/** Runs one statement on the maintenance database. */
export const adminSql = (statement: string) => MigratedDatabase.adminStatement(inject("pgAdminUrl"), statement)

const fresh = (template: string | undefined, options: Partial<PgClient.PgPoolConfig>) =>
  Layer.unwrap(
    Effect.gen(function* () {
      const name = `t_${randomUUID().replaceAll("-", "")}`
      const from = template === undefined ? "" : ` TEMPLATE "${template}"`
      yield* Effect.acquireRelease(adminSql(`CREATE DATABASE "${name}"${from}`), () =>
        adminSql(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`).pipe(Effect.ignore),
      )
      const url = withDatabase(inject("pgAdminUrl"), name)
      return Layer.merge(
        PgClient.layer({ url: Redacted.make(url), maxConnections: 10, ...options }),
        Layer.succeed(TestDatabase, TestDatabase.of({ name, url })),
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
export const otherClient = Effect.flatMap(TestDatabase, ({ url }) =>
  Layer.build(PgClient.layer({ url: Redacted.make(url), maxConnections: 4 })),
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
    return { name, url: withDatabase(inject("pgAdminUrl"), name) }
  })
