/**
 * The PostgreSQL connection every bothy service uses: `DATABASE_URL` when it is set, otherwise an
 * embedded PostgreSQL 18 kept under `BOTHY_HOME` (default `.bothy/` in the working folder), whose
 * lifetime is the layer's. The URLs' TLS parameters keep libpq's meaning (`DatabaseTls`). Either
 * way the first connection is made while the layer is built, so a server that cannot be reached
 * stops the start with one line naming it and the cause.
 *
 * With `DATABASE_URL`, the start also finds whether a pooler stands in between, and in which mode
 * (`DatabaseSessions`): behind one the pool prepares no statements (a statement prepared on one
 * server connection is unknown to the next), and what needs a session of its own goes over
 * `DATABASE_DIRECT_URL` when it is set. One line at start says which.
 *
 * A `DATABASE_URL` naming several hosts (a primary and its standbys) is followed through a
 * failover: new connections go to whichever host is the primary now (`DatabaseHosts`).
 *
 * With a named schema (`database.schema`), every direct connection (the embedded server's,
 * `DATABASE_URL` without a pooler, `DATABASE_DIRECT_URL`) asks for it as its `search_path` at
 * start-up; through a pooler the role must carry it (`DatabaseSchema`), which migrations and
 * `checkMigrated` verify.
 */
import { join } from "node:path"
import { PgClient } from "@effect/sql-pg"
import { Context, Effect, Layer, Option, Redacted } from "effect"
import { SqlClient } from "effect/sql"
import { envName, InvalidConfig, parseCount, parseText, setting, variable } from "./BothyConfig.ts"
import * as DatabaseHosts from "./DatabaseHosts.ts"
import * as DatabaseSchema from "./DatabaseSchema.ts"
import * as DatabaseSessions from "./DatabaseSessions.ts"
import * as DatabaseTls from "./DatabaseTls.ts"
import * as DatabaseUnavailable from "./DatabaseUnavailable.ts"
import * as EmbeddedPostgres from "./EmbeddedPostgres.ts"
import * as Migrations from "./Migrations.ts"
import * as PostgresVersion from "./PostgresVersion.ts"

// Set but empty is refused rather than read as unset: a deploy whose URL failed to render must
// never start an embedded server and write to a local database instead.
const databaseUrl = variable("DATABASE_URL", { unset: "to run an embedded PostgreSQL" })

/** A direct connection for what a transaction pooler on `DATABASE_URL` cannot carry (LISTEN). */
export const directUrl = variable("DATABASE_DIRECT_URL", {
  unset: "when DATABASE_URL reaches PostgreSQL directly (or LISTEN may give way to polling)",
})

/** Whether `DATABASE_URL` is set (otherwise bothy runs an embedded server). */
export const external = Effect.map(databaseUrl, Option.isSome)

/** The folder of the embedded server's state. */
export const home = setting("home", ".bothy", parseText)

/**
 * The server bothy started for itself, if any. `exited` fails when that server exits under the
 * process (its scope did not stop it); with `DATABASE_URL` it never completes. `bothy worker` waits
 * on it, so a dead embedded server ends the worker with one line and a non-zero exit.
 */
export class DatabaseServer extends Context.Service<
  DatabaseServer,
  { readonly embedded: boolean; readonly exited: Effect.Effect<never, EmbeddedPostgres.EmbeddedServerExited> }
>()("bothy/DatabaseServer") {}

/**
 * A pool whose first connection is made at once, so a bad server, user or database stops the
 * start; so does a server older than bothy supports (`PostgresVersionUnsupported`).
 */
const connected = (config: PgClient.PgPoolConfig, target: string, variable?: string) =>
  PgClient.layerFrom(
    PgClient.make(config).pipe(
      Effect.tap((sql) => PostgresVersion.check().pipe(Effect.provideService(SqlClient.SqlClient, sql))),
      Effect.catchTag("SqlError", (e) => Effect.fail(DatabaseUnavailable.describe(e, target, variable))),
    ),
  )

/**
 * Connection pool for `DATABASE_URL`, or for an embedded server started for the layer's lifetime;
 * also `DatabaseServer`. Fails at build with one clear error: `DatabaseUnavailable` naming the server
 * and the cause, `PostgresVersionUnsupported` naming its version and the minimum,
 * `EmbeddedPortInUse` naming `BOTHY_EMBEDDED_PORT`, or why the embedded server could not start.
 */
export const layer = Layer.unwrap(
  Effect.gen(function* () {
    const url = yield* databaseUrl
    const maxConnections = yield* setting("database.pool_size", "10", parseCount(1, 1000))
    const direct = yield* directUrl
    const schema = yield* DatabaseSchema.load
    const schemaLayer = Layer.succeed(DatabaseSchema.DatabaseSchema, schema)
    if (schema !== DatabaseSchema.defaultSchema) {
      yield* Effect.logInfo(
        `bothy's objects live in schema ${DatabaseSchema.quoted(schema)} (${envName(DatabaseSchema.key)})`,
      )
    }
    const startupParameters = DatabaseSchema.startupParameters(schema)
    if (Option.isSome(url)) {
      return Layer.merge(yield* externalLayer(url.value, direct, { maxConnections, startupParameters }), schemaLayer)
    }
    if (Option.isSome(direct)) {
      return yield* new InvalidConfig({
        keys: [DatabaseSessions.directVariable],
        detail: `${DatabaseSessions.directVariable} is set but DATABASE_URL is not; set both, or neither to run an embedded PostgreSQL`,
      })
    }
    const dir = yield* home
    const port = yield* setting("embedded_port", "54329", parseCount(1, 65535))
    const server = yield* EmbeddedPostgres.start({
      dataDir: join(dir, "pg"),
      passwordFile: join(dir, "password"),
      port,
    }).pipe(
      Effect.catchTag("EmbeddedPortInUse", (e) =>
        Effect.fail(new EmbeddedPostgres.EmbeddedPortInUse({ port: e.port, variable: envName("embedded_port") })),
      ),
    )
    yield* Effect.logInfo(
      `embedded PostgreSQL 18 listening on ${server.host}:${server.port} (data in ${server.dataDir}); ` +
        `connect as postgres://postgres@${server.host}:${server.port}/postgres with the password in ${join(dir, "password")}`,
    )
    const target = `the embedded PostgreSQL at ${server.host}:${server.port}`
    return Layer.mergeAll(
      connected(
        {
          host: server.host,
          port: server.port,
          username: server.user,
          password: server.password,
          database: "postgres",
          maxConnections,
          applicationName: "bothy",
          ...(startupParameters && { startupParameters }),
        },
        target,
      ),
      Layer.succeed(DatabaseServer, DatabaseServer.of({ embedded: true, exited: server.exited })),
      schemaLayer,
    )
  }),
)

const targetOf = (url: Redacted.Redacted) =>
  DatabaseUnavailable.redactedUrl(Redacted.value(url)) ?? "a URL that does not parse"

/** Host and port only, as a pooler is named in lines. */
const hostOf = (url: Redacted.Redacted) => {
  try {
    return new URL(Redacted.value(url)).host
  } catch {
    return "DATABASE_URL"
  }
}

/** With several hosts in `DATABASE_URL`: the first primary among them, or a start refused with one line. */
const firstPrimary = (hosts: DatabaseHosts.Hosts) =>
  Effect.gen(function* () {
    const first = hosts.hosts[0]!
    const ssl = yield* DatabaseTls.fromUrl(Redacted.value(hosts.urlOf(first)), "DATABASE_URL")
    const found = yield* DatabaseHosts.findPrimary(hosts, ssl)
    if (Option.isNone(found)) {
      return yield* new DatabaseUnavailable.DatabaseUnavailable({
        target: hosts.hosts.map((h) => `${h.host}:${h.port}`).join(", "),
        variable: "DATABASE_URL",
        cause: "no host is a primary (each is unreachable or in recovery)",
      })
    }
    return { host: found.value, url: hosts.urlOf(found.value) }
  })

interface PoolOptions {
  readonly maxConnections: number
  /** For direct connections only: a pooler refuses parameters it does not track. */
  readonly startupParameters: Record<string, string> | undefined
}

/** The pool on `DATABASE_URL` and where sessions of their own go (see the module header). */
const externalLayer = (
  given: Redacted.Redacted,
  direct: Option.Option<Redacted.Redacted>,
  { maxConnections, startupParameters }: PoolOptions,
) =>
  Effect.gen(function* () {
    const hosts = yield* DatabaseHosts.parse(Redacted.value(given))
    const primary = Option.isSome(hosts) ? yield* firstPrimary(hosts.value) : undefined
    const url = primary === undefined ? given : primary.url
    const target = targetOf(url)
    const ssl = yield* DatabaseTls.fromUrl(Redacted.value(url), "DATABASE_URL")
    const chooser =
      Option.isSome(hosts) && primary !== undefined
        ? yield* DatabaseHosts.make(hosts.value, primary.host, ssl)
        : undefined
    const directSsl = Option.isSome(direct)
      ? yield* DatabaseTls.fromUrl(Redacted.value(direct.value), DatabaseSessions.directVariable)
      : undefined
    const route = yield* DatabaseSessions.detect({ url, ...(ssl && { ssl }) }, hostOf(url)).pipe(
      Effect.mapError((e) => DatabaseUnavailable.describe(e, target, "DATABASE_URL")),
    )
    if (Option.isSome(direct)) {
      // Checked at start like DATABASE_URL, so a wrong one stops the start rather than the listener.
      yield* DatabaseSessions.detect(
        { url: direct.value, ...(directSsl && { ssl: directSsl }) },
        hostOf(direct.value),
      ).pipe(
        Effect.mapError((e) =>
          DatabaseUnavailable.describe(e, targetOf(direct.value), DatabaseSessions.directVariable),
        ),
      )
    }
    const sessions: DatabaseSessions.DatabaseSessions = {
      route,
      session: Option.isSome(direct)
        ? Option.some({ url: direct, ssl: directSsl, startupParameters, variable: DatabaseSessions.directVariable })
        : route._tag === "Pooler" && route.mode === "transaction"
          ? Option.none()
          : Option.some({ url: Option.none(), variable: "DATABASE_URL" }),
    }
    yield* route._tag === "Direct" && Option.isNone(direct)
      ? Effect.logDebug(DatabaseSessions.describe(sessions))
      : Effect.logInfo(DatabaseSessions.describe(sessions))
    return Layer.mergeAll(
      connected(
        {
          url,
          maxConnections,
          applicationName: "bothy",
          prepare: route._tag === "Direct",
          ...(ssl && { ssl }),
          ...(route._tag === "Direct" && startupParameters && { startupParameters }),
          // Several hosts: each new connection goes to the primary found last (`DatabaseHosts`).
          ...(chooser && { stream: chooser.stream }),
          ...(chooser && ssl && { ssl: chooser.ssl(ssl) }),
        },
        target,
        "DATABASE_URL",
      ),
      Layer.succeed(DatabaseServer, DatabaseServer.of({ embedded: false, exited: Effect.never })),
      Layer.succeed(DatabaseSessions.DatabaseSessions, sessions),
    )
  })

/** Applies pending migrations while the layer is built. */
export const migrate = Layer.effectDiscard(
  Migrations.run.pipe(
    Effect.tap((applied) =>
      applied.length === 0
        ? Effect.logInfo("schema is current")
        : Effect.logInfo(
            `applied migrations: ${applied.map(([id, name]) => `${String(id).padStart(4, "0")}_${name}`).join(", ")}`,
          ),
    ),
  ),
)

/**
 * Checks, while the layer is built, that the schema is at this bothy's latest migration, and
 * changes nothing: `SchemaNotCurrent` names what is missing and says to run `bothy migrate`. For
 * commands that must not migrate a database an older fleet may still run (the admin CLI).
 */
export const checkMigrated = Layer.effectDiscard(Migrations.check)
