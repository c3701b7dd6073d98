/**
 * A fresh database per test file (or per `layer(...)` block), cloned from the migrated template the
 * global setup made, and dropped when the layer closes.
 */
import { randomUUID } from "node:crypto"
import { PgClient } from "@effect/sql-pg"
import { Context, Effect, Layer, Redacted } from "effect"
import { SqlClient } from "effect/sql"
import { inject } from "vitest"
import { withDatabase } from "./DatabaseUrl.ts"

export class TestDatabase extends Context.Service<
  TestDatabase,
  {
    readonly name: string
    /** Full URL with credentials, for child processes and second clients. */
    readonly url: string
  }
>()("test/TestDatabase") {}

const admin = () => PgClient.layer({ url: Redacted.make(inject("pgAdminUrl")), maxConnections: 1 })

/** Runs one statement on the maintenance database. */
export const adminSql = (statement: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) => sql.unsafe(statement)).pipe(Effect.provide(admin()))

/** Clones the template into a new database; provides a pool on it and `TestDatabase`. */
export const layer = (options: Partial<PgClient.PgPoolConfig> = {}) =>
  Layer.unwrap(
    Effect.gen(function* () {
      const name = `t_${randomUUID().replaceAll("-", "")}`
      yield* Effect.acquireRelease(adminSql(`CREATE DATABASE "${name}" TEMPLATE "${inject("pgTemplate")}"`), () =>
        adminSql(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`).pipe(Effect.ignore),
      )
      const url = withDatabase(inject("pgAdminUrl"), name)
      return Layer.merge(
        PgClient.layer({ url: Redacted.make(url), maxConnections: 10, ...options }),
        Layer.succeed(TestDatabase, TestDatabase.of({ name, url })),
      )
    }),
  ).pipe(Layer.orDie)
