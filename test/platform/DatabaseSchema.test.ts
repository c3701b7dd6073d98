/**
 * A schema of bothy's own, as a host app composes it (`Migrations.run` on its own pool, the schema
 * given by `DatabaseSchema.layer`): the name is validated, a pool that does not look in the schema
 * first is refused before anything is created, a role that may not create the schema is told the
 * statement its owner runs, and that statement is enough.
 */

import { PgClient } from "@effect/sql-pg"
import { assert, describe, it, layer } from "@effect/vitest"
import { ConfigProvider, Effect, Exit, Layer, Redacted } from "effect"
import { SqlClient } from "effect/sql"
import { inject } from "vitest"
import * as DatabaseSchema from "../../src/platform/DatabaseSchema.ts"
import * as Migrations from "../../src/platform/Migrations.ts"
import { withDatabase } from "../../testkit/DatabaseUrl.ts"
import * as OwnedDatabase from "../support/OwnedDatabase.ts"
import * as TestDatabase from "../support/TestDatabase.ts"

const loadWith = (value: string) =>
  DatabaseSchema.load.pipe(
    Effect.provide(ConfigProvider.layer(ConfigProvider.fromEnv({ env: { BOTHY_DATABASE_SCHEMA: value } }))),
  )

/** The failure of `effect`, which must fail. */
const failure = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.map(Effect.exit(effect), (exit) => {
    assert.isTrue(Exit.isFailure(exit), "expected a failure")
    return Exit.isFailure(exit) ? (exit.cause.reasons[0] as { readonly error: E }).error : (undefined as never)
  })

describe("DatabaseSchema settings", () => {
  it.effect("DatabaseSchemaValidated: lower-case identifiers pass, anything else stops the start with one line", () =>
    Effect.gen(function* () {
      assert.strictEqual(yield* loadWith("bothy"), "bothy")
      assert.strictEqual(yield* loadWith(" bothy_2 "), "bothy_2")
      assert.strictEqual(yield* DatabaseSchema.load, "public", "unset: public, as before")
      for (const bad of [
        "Bothy",
        "my-schema",
        "bothy$1",
        "2bothy",
        "pg_bothy",
        "information_schema",
        "a".repeat(64),
        '"x"',
      ]) {
        const error = yield* failure(loadWith(bad))
        assert.strictEqual(error._tag, "InvalidConfig", bad)
        assert.include(error.message, "BOTHY_DATABASE_SCHEMA (database.schema)")
        assert.notInclude(error.message, "\n")
      }
    }),
  )
})

layer(TestDatabase.layerEmpty(), { excludeTestServices: true })("DatabaseSchema on a pool", (it) => {
  it.effect(
    "OwnSchemaNotOnSearchPathRefused: a pool whose search_path does not start with the schema is refused with one line naming the schema, the path found and the statement to run; nothing of bothy's is created",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const error = yield* failure(Migrations.run.pipe(Effect.provide(DatabaseSchema.layer("bothy_elsewhere"))))
        assert.strictEqual(error._tag, "SchemaNotOnSearchPath")
        assert.notInclude(error.message, "\n")
        assert.include(error.message, `bothy's schema "bothy_elsewhere" (BOTHY_DATABASE_SCHEMA)`)
        assert.include(error.message, `search_path is "$user", public`)
        assert.match(error.message, /run ALTER ROLE "[^"]+" IN DATABASE "[^"]+" SET search_path = "bothy_elsewhere"/)
        const [tables] = yield* sql<{ n: number }>`
          SELECT count(*)::int AS n FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
          WHERE n.nspname IN ('public', 'bothy_elsewhere')`
        assert.strictEqual(tables!.n, 0, "no table was created anywhere")
        // The check also holds for commands that never migrate.
        const current = yield* failure(Migrations.check.pipe(Effect.provide(DatabaseSchema.layer("bothy_elsewhere"))))
        assert.strictEqual(current._tag, "SchemaNotOnSearchPath")
      }),
  )
})

describe("DatabaseSchema and the role's rights", () => {
  it.live(
    "OwnSchemaCreateDenied: a role that may not create the schema gets the CREATE SCHEMA ... AUTHORIZATION its owner runs; once run, bothy migrates into it",
    () =>
      Effect.gen(function* () {
        const owned = yield* OwnedDatabase.make
        // A second role that may connect but not create: as a host app's shared database gives one.
        const guest = `${owned.role}_guest`
        yield* Effect.acquireRelease(TestDatabase.adminSql(`CREATE ROLE ${guest} LOGIN PASSWORD 'guest'`), () =>
          TestDatabase.adminSql(`DROP OWNED BY ${guest} CASCADE; DROP ROLE IF EXISTS ${guest}`).pipe(Effect.ignore),
        )
        const url = new URL(owned.url)
        url.username = guest
        url.password = "guest"
        const pool = (schema: string) =>
          PgClient.layer({
            url: Redacted.make(url.toString()),
            maxConnections: 2,
            ...(DatabaseSchema.startupParameters(schema) && {
              startupParameters: DatabaseSchema.startupParameters(schema),
            }),
          })
        const migrate = Migrations.run.pipe(
          Effect.provide(Layer.merge(pool("bothy_guest"), DatabaseSchema.layer("bothy_guest"))),
        )
        const error = yield* failure(migrate)
        assert.strictEqual(error._tag, "SchemaAccessDenied")
        assert.notInclude(error.message, "\n")
        const statement = `CREATE SCHEMA "bothy_guest" AUTHORIZATION "${guest}"`
        assert.include(error.message, `run ${statement}`)
        // As the server's administrator: the database's owner would also need to be able to SET ROLE the guest.
        yield* Effect.flatMap(SqlClient.SqlClient, (sql) => sql.unsafe(statement)).pipe(
          Effect.provide(
            PgClient.layer({ url: Redacted.make(withDatabase(inject("pgAdminUrl"), owned.name)), maxConnections: 1 }),
          ),
        )
        const applied = yield* migrate
        assert.strictEqual(applied.length, Object.keys(Migrations.migrations).length)
      }).pipe(Effect.scoped),
    60_000,
  )
})
