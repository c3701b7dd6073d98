/**
 * The PostgreSQL connection every bothy service uses: `DATABASE_URL` when it is set, otherwise an
 * embedded PostgreSQL 18 kept under `BOTHY_HOME` (default `.bothy/` in the working folder), whose
 * lifetime is the layer's.
 */
import { join } from "node:path"
import { PgClient } from "@effect/sql-pg"
import { Effect, Layer, Option } from "effect"
import { parseCount, parseText, setting, variable } from "./BothyConfig.ts"
import * as EmbeddedPostgres from "./EmbeddedPostgres.ts"
import * as Migrations from "./Migrations.ts"

// Set but empty is refused rather than read as unset: a deploy whose URL failed to render must
// never start an embedded server and write to a local database instead.
const databaseUrl = variable("DATABASE_URL", { unset: "to run an embedded PostgreSQL" })

/** Whether `DATABASE_URL` is set (otherwise bothy runs an embedded server). */
export const external = Effect.map(databaseUrl, Option.isSome)

/** The folder of the embedded server's state. */
export const home = setting("home", ".bothy", parseText)

/** Connection pool for `DATABASE_URL`, or for an embedded server started for the layer's lifetime. */
export const layer = Layer.unwrap(
  Effect.gen(function* () {
    const url = yield* databaseUrl
    const maxConnections = yield* setting("database.pool_size", "10", parseCount(1, 1000))
    if (Option.isSome(url)) {
      return PgClient.layer({ url: url.value, maxConnections, applicationName: "bothy" })
    }
    const dir = yield* home
    const port = yield* setting("embedded_port", "54329", parseCount(1, 65535))
    const server = yield* EmbeddedPostgres.start({
      dataDir: join(dir, "pg"),
      passwordFile: join(dir, "password"),
      port,
    })
    yield* Effect.logInfo(
      `embedded PostgreSQL 18 listening on ${server.host}:${server.port} (data in ${server.dataDir}); ` +
        `connect as postgres://postgres@${server.host}:${server.port}/postgres with the password in ${join(dir, "password")}`,
    )
    return PgClient.layer({
      host: server.host,
      port: server.port,
      username: server.user,
      password: server.password,
      database: "postgres",
      maxConnections,
      applicationName: "bothy",
    })
  }),
)

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
