/**
 * The PostgreSQL schema bothy's objects live in: `database.schema` (`BOTHY_DATABASE_SCHEMA`),
 * `public` by default. bothy's SQL names its tables unqualified, so they resolve, and everything
 * bothy creates (tables, retention's partitions, sequences, functions, the migrations' bookkeeping)
 * lands, in the connection's current schema: the first schema of its `search_path`
 * that exists and that the role may use.
 *
 * What it keeps true: with a named schema, neither migrations nor the check of commands that never
 * migrate go on unless that current schema is bothy's, on a connection of the pool and on one of
 * the session URL (`DATABASE_DIRECT_URL`). A host
 * table in `public` named like one of bothy's (`public.jobs`) is then never what bothy reads or
 * writes, since bothy's schema comes first. Otherwise the start stops with one line naming the
 * schema, what the connection's path is, and the statement to run.
 *
 * How a connection gets the path:
 * - a direct connection (the embedded server, a `DATABASE_URL` without a pooler, the
 *   `DATABASE_DIRECT_URL`): bothy sends `search_path` in the connection's startup packet;
 * - through a pooler: the startup packet is the pooler's to keep (PgBouncer 1.18 refuses a startup
 *   parameter it does not track, `search_path` among them, and its server connections are shared),
 *   so the role carries it: `ALTER ROLE ... IN DATABASE ... SET search_path`, which PostgreSQL
 *   applies to every server connection the pooler opens for that role. bothy checks it at start.
 *
 * The default `public` changes nothing from before: no startup parameter, no check.
 */
import { PgClient } from "@effect/sql-pg"
import { Context, Effect, Layer, Option, Result, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { envName, InvalidConfig, setting } from "./BothyConfig.ts"
import * as DatabaseSessions from "./DatabaseSessions.ts"

/** The setting's key, and the schema bothy uses when it is unset. */
export const key = "database.schema"
export const defaultSchema = "public"

/** The schema bothy's objects live in; `Database.layer` provides the configured one, a host app its own. */
export const DatabaseSchema = Context.Reference<string>("bothy/DatabaseSchema", {
  defaultValue: () => defaultSchema,
})

/**
 * A name that means the same quoted or not, in SQL, in `search_path` and in psql: lower-case
 * letters, digits and `_`, not starting with a digit, at most 63 bytes, and not one of
 * PostgreSQL's own (`pg_...`, `information_schema`).
 */
export const parse = (raw: string): Result.Result<string, string> => {
  const name = raw.trim()
  if (!/^[a-z_][a-z0-9_]*$/.test(name) || name.length > 63)
    return Result.fail(
      "expected a schema name of lower-case letters, digits and _ (at most 63, not starting with a digit)",
    )
  if (name.startsWith("pg_") || name === "information_schema")
    return Result.fail("expected a schema of bothy's own, not one of PostgreSQL's")
  return Result.succeed(name)
}

/** `database.schema` from the environment, validated; `public` when unset. */
export const load = setting(key, defaultSchema, parse)

/** The schema `name` for a host app that gives it directly; the same rules as the variable. */
export const layer = (name: string) =>
  Layer.effect(
    DatabaseSchema,
    Effect.mapError(
      Effect.fromResult(parse(name)),
      (why) => new InvalidConfig({ keys: [key], detail: `${key} = ${JSON.stringify(name)}: ${why}` }),
    ),
  )

/**
 * `name` as an SQL identifier.
 * @internal
 */
export const quoted = (name: string) => `"${name.replaceAll('"', '""')}"`

/**
 * The startup parameters a direct connection carries so that `schema` is its current schema; none
 * for `public`. Give them to a host's own pool too: `PgClient.layer({ ..., startupParameters })`.
 */
export const startupParameters = (schema: string): Record<string, string> | undefined =>
  schema === defaultSchema ? undefined : { search_path: quoted(schema) }

/** The role may not create bothy's schema (`create`), or may not use the one that exists (`use`). */
export class SchemaAccessDenied extends Schema.TaggedError<SchemaAccessDenied>()("SchemaAccessDenied", {
  schema: Schema.String,
  role: Schema.String,
  database: Schema.String,
  needs: Schema.Literals(["create", "use"]),
}) {
  override get message() {
    const [s, r] = [quoted(this.schema), quoted(this.role)]
    return this.needs === "create"
      ? `bothy's schema ${s} (${envName(key)}) does not exist in database ${quoted(this.database)} and role ${r} may not create it: ` +
          `run CREATE SCHEMA ${s} AUTHORIZATION ${r} as a role that may (the database's owner, if it may SET ROLE ${r})`
      : `role ${r} may not use bothy's schema ${s} (${envName(key)}) in database ${quoted(this.database)}: ` +
          `as its owner, run GRANT USAGE, CREATE ON SCHEMA ${s} TO ${r}`
  }
}

/** bothy's schema is not the current schema of the connections `variable` names. */
export class SchemaNotOnSearchPath extends Schema.TaggedError<SchemaNotOnSearchPath>()("SchemaNotOnSearchPath", {
  schema: Schema.String,
  /** Which connections: `DATABASE_URL`, `DATABASE_DIRECT_URL`, or a host's pool. */
  variable: Schema.String,
  /** Their `search_path`, as PostgreSQL reports it. */
  searchPath: Schema.String,
  /** Their current schema (where unqualified names resolve first and CREATEs go); none when no entry exists. */
  current: Schema.NullOr(Schema.String),
  role: Schema.String,
  database: Schema.String,
}) {
  override get message() {
    const s = quoted(this.schema)
    const where = this.current === null ? "no schema" : `schema ${quoted(this.current)}`
    return (
      `bothy's schema ${s} (${envName(key)}) is not first on the search_path of ${this.variable}'s connections ` +
      `(search_path is ${this.searchPath}, so bothy's tables would resolve in ${where}): ` +
      `run ALTER ROLE ${quoted(this.role)} IN DATABASE ${quoted(this.database)} SET search_path = ${s}, ` +
      `then reconnect the pooler's server connections (PgBouncer: RECONNECT)`
    )
  }
}

/** bothy's schema does not exist yet: nothing was migrated into it. */
export class SchemaMissing extends Schema.TaggedError<SchemaMissing>()("SchemaMissing", {
  schema: Schema.String,
  database: Schema.String,
}) {
  override get message() {
    return (
      `bothy's schema ${quoted(this.schema)} (${envName(key)}) does not exist in database ${quoted(this.database)}: ` +
      "run `bothy migrate` first (this command never changes the schema)"
    )
  }
}

interface Found {
  readonly present: boolean
  readonly usable: boolean
  readonly may_create: boolean
  readonly current: string | null
  readonly search_path: string
  readonly role: string
  readonly database: string
}

/** One statement: what the connection sees of `schema`. */
const look = (sql: SqlClient.SqlClient, schema: string) =>
  Effect.map(
    sql<Found>`
      SELECT n.oid IS NOT NULL AS present,
             n.oid IS NOT NULL AND has_schema_privilege(n.oid, 'USAGE, CREATE') AS usable,
             has_database_privilege(current_database(), 'CREATE') AS may_create,
             current_schema() AS current, current_setting('search_path') AS search_path,
             current_user AS role, current_database() AS database
      FROM (SELECT 1) AS one LEFT JOIN pg_namespace AS n ON n.nspname = ${schema}`.withoutTransform,
    (rows) => rows[0]!,
  )

const denied = (schema: string, found: Found, needs: "create" | "use") =>
  new SchemaAccessDenied({ schema, role: found.role, database: found.database, needs })

/**
 * Checks that `schema` is the current schema of `sql`'s connections (`variable` names them): fails
 * with `SchemaAccessDenied` when the role may not use it, `SchemaNotOnSearchPath` otherwise.
 * @internal
 */
export const verifyOn = (sql: SqlClient.SqlClient, schema: string, variable: string) =>
  Effect.gen(function* () {
    if (schema === defaultSchema) return
    const found = yield* look(sql, schema)
    if (!found.present) return yield* new SchemaMissing({ schema, database: found.database })
    if (!found.usable) return yield* denied(schema, found, "use")
    if (found.current !== schema) {
      return yield* new SchemaNotOnSearchPath({
        schema,
        variable,
        searchPath: found.search_path,
        current: found.current,
        role: found.role,
        database: found.database,
      })
    }
  })

/** The same check over the URL that sessions of their own take (LISTEN, retention's detaches), when they have one. */
const verifySession = (schema: string) =>
  Effect.gen(function* () {
    const { session } = yield* DatabaseSessions.DatabaseSessions
    if (schema === defaultSchema || Option.isNone(session)) return
    const { url, ssl, startupParameters, variable } = session.value
    if (Option.isNone(url)) return
    yield* Effect.flatMap(SqlClient.SqlClient, (sql) => verifyOn(sql, schema, variable)).pipe(
      Effect.provide(
        PgClient.layer({
          url: url.value,
          maxConnections: 1,
          applicationName: "bothy-session",
          ...(ssl && { ssl }),
          ...(startupParameters && { startupParameters }),
        }),
      ),
    )
  })

/**
 * Creates the configured schema when it is missing (`SchemaAccessDenied` when the role may not),
 * then checks the pool's connections find it first. For migrations, before anything is created.
 * @internal
 */
export const prepare = Effect.gen(function* () {
  const schema = yield* DatabaseSchema
  if (schema === defaultSchema) return
  const sql = yield* SqlClient.SqlClient
  const found = yield* look(sql, schema)
  if (!found.present) {
    if (!found.may_create) return yield* denied(schema, found, "create")
    // Two migrators starting at once may both find it missing; IF NOT EXISTS lets the second pass.
    yield* sql.unsafe(`CREATE SCHEMA IF NOT EXISTS ${quoted(schema)}`)
  }
  yield* verifyOn(sql, schema, "DATABASE_URL")
  yield* verifySession(schema)
}).pipe(Effect.withSpan("DatabaseSchema.prepare"))

/**
 * Checks the pool's connections find the configured schema first (for commands that never migrate).
 * @internal
 */
export const verify = Effect.gen(function* () {
  const schema = yield* DatabaseSchema
  yield* verifyOn(yield* SqlClient.SqlClient, schema, "DATABASE_URL")
  yield* verifySession(schema)
}).pipe(Effect.withSpan("DatabaseSchema.verify"))
