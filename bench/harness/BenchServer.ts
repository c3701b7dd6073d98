/**
 * The PostgreSQL every benchmark runs against: the kit's embedded server (`testkit/EmbeddedServer`)
 * with the durable defaults (fsync and synchronous_commit on), in a fresh temporary folder on a
 * free port, with bothy's migrations applied. Closing the scope stops the server and removes the
 * folder, so a run leaves nothing running and nothing on disk.
 *
 * Durability is checked, not assumed: an append measured with fsync off measures the CPU instead
 * of the commit, so the layer refuses a server that reports anything but fsync and
 * synchronous_commit on. The settings it read are part of every result file.
 */
import { PgClient } from "@effect/sql-pg"
import { Config, Context, Effect, Layer, Redacted, Schema } from "effect"
import { SqlClient } from "effect/sql"
import type { SqlError } from "effect/sql/SqlError"
import * as Migrations from "../../src/platform/Migrations.ts"
import * as EmbeddedServer from "../../testkit/EmbeddedServer.ts"

/** Server settings that decide what a write benchmark measures, as `SHOW` prints them. */
export const reportedSettings = [
  "server_version",
  "fsync",
  "synchronous_commit",
  "wal_level",
  "wal_sync_method",
  "full_page_writes",
  "shared_buffers",
  "max_connections",
] as const

export type ServerSettings = Readonly<Record<(typeof reportedSettings)[number], string>>

export class NotDurable extends Schema.TaggedError<NotDurable>()("NotDurable", { detail: Schema.String }) {
  override get message() {
    return `the benchmark server is not durable, so its figures would not be comparable: ${this.detail}`
  }
}

/** The connection settings of the plain `pg` driver baselines (their own application name). */
export const pgClientConfig = (server: {
  readonly host: string
  readonly port: number
  readonly user: string
  readonly password: Redacted.Redacted
  readonly database: string
}) => ({
  host: server.host,
  port: server.port,
  user: server.user,
  password: Redacted.value(server.password),
  database: server.database,
  application_name: "bothy-bench-baseline",
})

export class BenchServer extends Context.Service<
  BenchServer,
  {
    readonly host: string
    readonly port: number
    readonly user: string
    readonly password: Redacted.Redacted
    /** The migrated database. */
    readonly database: string
    readonly settings: ServerSettings
    /** The folder the data directory lives in, for the conditions of a result. */
    readonly folder: string
    /** The cluster's data directory (its `postmaster.pid` names the server's process). */
    readonly dataDir: string
    /**
     * A fresh `@effect/sql-pg` pool on the migrated database; it opens every connection up front,
     * or, with `lazy`, each when first needed (the driver's default, as an application runs it).
     * `session` sets PostgreSQL settings for this pool's connections only (startup parameters),
     * for what-if runs; the server's own settings stay durable.
     */
    readonly pool: (
      connections: number,
      options?: { readonly lazy?: boolean; readonly session?: Readonly<Record<string, string>> },
    ) => Layer.Layer<PgClient.PgClient | SqlClient.SqlClient, SqlError>
  }
>()("bench/BenchServer") {
  static readonly layer = Layer.effect(
    BenchServer,
    Effect.gen(function* () {
      const server = yield* EmbeddedServer.start({
        prefix: "bothy-bench-",
        openFolder: true,
        settings: extraSettings(yield* Config.String("BENCH_PG_SETTINGS").pipe(Config.withDefault(""))),
      })
      const database = "postgres"
      const pool = (
        connections: number,
        options?: { readonly lazy?: boolean; readonly session?: Readonly<Record<string, string>> },
      ) =>
        PgClient.layer({
          host: server.host,
          port: server.port,
          username: server.user,
          password: server.password,
          database,
          maxConnections: connections,
          minConnections: options?.lazy === true ? 0 : connections,
          applicationName: "bothy-bench",
          startupParameters: options?.session ?? {},
        })

      const settings = yield* Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        yield* Migrations.run
        const shown: Array<readonly [string, string]> = []
        for (const name of reportedSettings) {
          const rows = yield* sql.unsafe<Record<string, string>>(`SHOW ${name}`)
          shown.push([name, rows[0]?.[name] ?? "?"])
        }
        return Object.fromEntries(shown) as ServerSettings
      }).pipe(Effect.provide(pool(1)))

      if (settings.fsync !== "on" || settings.synchronous_commit !== "on") {
        return yield* new NotDurable({
          detail: `fsync=${settings.fsync}, synchronous_commit=${settings.synchronous_commit}`,
        })
      }
      return BenchServer.of({
        host: server.host,
        port: server.port,
        user: server.user,
        password: server.password,
        database,
        settings,
        folder: server.folder,
        dataDir: server.dataDir(),
        pool,
      })
    }),
  )
}

/**
 * BENCH_PG_SETTINGS="name=value,name=value": extra server settings for a diagnostic run (say
 * `shared_preload_libraries=pg_stat_statements`); the durability check below still applies.
 */
const extraSettings = (raw: string): Record<string, string> =>
  Object.fromEntries(
    raw
      .split(",")
      .filter((pair) => pair.includes("="))
      .map((pair) => [pair.slice(0, pair.indexOf("=")).trim(), pair.slice(pair.indexOf("=") + 1).trim()]),
  )
