/**
 * A primary and a streaming standby for failover drills, both bothy's own embedded server
 * (`EmbeddedServer`, `EmbeddedPostgres.start`). The embedded packages ship no `pg_basebackup`, so
 * the standby is made with PostgreSQL's documented low-level base backup: `pg_backup_start` on a
 * session of the primary, a copy of its data folder (without `postmaster.pid`, `postmaster.opts`
 * and what the documentation says to leave out: the files in `pg_wal`, `pg_replslot` and the
 * runtime folders), `pg_backup_stop` whose label goes into the copy as `backup_label`, then
 * `standby.signal` and `primary_conninfo` with a physical replication slot (so the primary keeps
 * every WAL segment the standby has not received).
 *
 * What it keeps true:
 * - Both servers and their data go with the scope, whatever state the drill left them in (the
 *   primary killed, the standby stopped or promoted).
 * - `killPrimary` is a crash: SIGKILL to the postmaster's whole process group, and it returns
 *   once the primary's port refuses connections.
 * - With `synchronous`, the primary names the standby in `synchronous_standby_names` once it
 *   streams, so from `start`'s return on a commit is acknowledged only after the standby has it.
 */
import {
  appendFileSync,
  chownSync,
  cpSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  statSync,
  writeFileSync,
} from "node:fs"
import { join, relative, sep } from "node:path"
import { PgClient } from "@effect/sql-pg"
import { Effect, Exit, Redacted, References, Scope } from "effect"
import { SqlClient } from "effect/sql"
import * as EmbeddedPostgres from "../src/platform/EmbeddedPostgres.ts"
import * as EmbeddedServer from "./EmbeddedServer.ts"

/** The standby's `application_name` and replication slot. */
export const standbyName = "bothy_standby"

const settings = {
  fsync: "off",
  full_page_writes: "off",
  max_connections: "200",
  wal_level: "replica",
  max_wal_senders: "5",
  max_replication_slots: "5",
  wal_sender_timeout: "5s",
  wal_receiver_status_interval: "1s",
}

/** Folders whose files a base backup leaves out (the folders themselves are kept). */
const leftOut = new Set([
  "pg_wal",
  "pg_replslot",
  "pg_dynshmem",
  "pg_notify",
  "pg_serial",
  "pg_snapshots",
  "pg_stat_tmp",
  "pg_subtrans",
])
const skippedFiles = new Set(["postmaster.pid", "postmaster.opts"])

const keep = (root: string) => (path: string) => {
  const parts = relative(root, path).split(sep)
  if (parts.length === 1 && skippedFiles.has(parts[0]!)) return false
  if (parts[0] === "pg_replslot") return parts.length === 1
  return !(leftOut.has(parts[0]!) && parts.length > 1 && !statSync(path).isDirectory())
}

/** Runs `f` with a client of one connection to `url`. */
const on = <A, E>(url: string, f: (sql: SqlClient.SqlClient) => Effect.Effect<A, E>) =>
  Effect.flatMap(SqlClient.SqlClient, f).pipe(
    Effect.provide(PgClient.layer({ url: Redacted.make(url), maxConnections: 1 })),
    Effect.orDie,
  )

/** Asks `check` every 50 ms until it holds, for at most 30 s. */
const until = (what: string, check: Effect.Effect<boolean>) =>
  Effect.gen(function* () {
    while (!(yield* check)) yield* Effect.sleep("50 millis")
  }).pipe(Effect.timeoutOrElse({ duration: "30 seconds", orElse: () => Effect.die(`${what}: not within 30 s`) }))

/** Copies the primary's data folder as a base backup into `into`, ready to start as a standby. */
const baseBackup = (primary: EmbeddedServer.EmbeddedServer, into: string) =>
  on(primary.adminUrl, (sql) =>
    Effect.gen(function* () {
      yield* sql`SELECT slot_name::text FROM pg_create_physical_replication_slot(${standbyName}, true)`
      return yield* sql.withTransaction(
        Effect.gen(function* () {
          yield* sql`SELECT pg_backup_start('drill', true)::text`
          const from = primary.dataDir()
          cpSync(from, into, { recursive: true, filter: keep(from) })
          const [stop] = yield* sql<{
            labelfile: string
            spcmapfile: string
          }>`SELECT labelfile, spcmapfile FROM pg_backup_stop()`
          writeFileSync(join(into, "backup_label"), stop!.labelfile)
          if (stop!.spcmapfile !== "") writeFileSync(join(into, "tablespace_map"), stop!.spcmapfile)
        }),
      )
    }),
  ).pipe(
    Effect.andThen(
      Effect.sync(() => {
        for (const dir of leftOut) mkdirSync(join(into, dir), { recursive: true })
        writeFileSync(join(into, "standby.signal"), "")
        const password = Redacted.value(primary.password)
        appendFileSync(
          join(into, "postgresql.auto.conf"),
          `primary_conninfo = 'host=${primary.host} port=${primary.port} user=${primary.user} password=${password} application_name=${standbyName}'\n` +
            `primary_slot_name = '${standbyName}'\n`,
        )
        // As root the server runs as another OS user, who owns the primary's folder: the copy is theirs too.
        const owner = statSync(primary.dataDir())
        if (process.getuid?.() === 0) chownTree(into, owner)
      }),
    ),
  )

/** Gives the copy to the server's OS user, as initdb would have made it. */
const chownTree = (path: string, user: { readonly uid: number; readonly gid: number }) => {
  for (const entry of readdirSync(path, { withFileTypes: true, recursive: true })) {
    chownSync(join(entry.parentPath, entry.name), user.uid, user.gid)
  }
  chownSync(path, user.uid, user.gid)
}

/** The postmaster's pid while it runs, from its `postmaster.pid`. */
const postmasterOf = (dataDir: string) => {
  try {
    const pid = Number(readFileSync(join(dataDir, "postmaster.pid"), "utf8").split("\n")[0])
    process.kill(pid, 0)
    return pid
  } catch {
    return undefined
  }
}

export interface Drill {
  readonly primary: EmbeddedServer.EmbeddedServer
  /** The standby's port (the same across `stopStandby` and `startStandby`). */
  readonly standbyPort: number
  /** A URL naming both hosts, primary first, for the database `name`, as libpq takes several hosts. */
  readonly bothUrl: (name: string) => string
  /** The standby's URL for the database `name`. */
  readonly standbyUrl: (name: string) => string
  /** SIGKILL to the primary's process group; returns once its postmaster is gone. */
  readonly killPrimary: Effect.Effect<void>
  /** Stops the standby (fast shutdown): the primary goes on alone. */
  readonly stopStandby: Effect.Effect<void>
  /** Starts the standby again on its data. */
  readonly startStandby: Effect.Effect<void>
  /** Promotes the standby and waits until it is out of recovery. */
  readonly promote: Effect.Effect<void>
  /** Waits until the standby has replayed everything the primary has written so far. */
  readonly caughtUp: Effect.Effect<void>
}

/** Starts the primary and its standby for the scope. */
export const start = (options: { readonly synchronous: boolean }) =>
  Effect.gen(function* () {
    const primary = yield* EmbeddedServer.start({ prefix: "bothy-drill-", settings, openFolder: true, quiet: true })
    const folder = yield* EmbeddedServer.tempFolder("bothy-standby-", { open: true })
    const dataDir = join(folder, "pg")
    yield* baseBackup(primary, dataDir)
    const port = yield* EmbeddedServer.freePort
    const standbyServer: EmbeddedPostgres.EmbeddedPostgresOptions = {
      dataDir,
      port,
      passwordFile: join(primary.folder, "password"),
      settings,
    }
    let scope: Scope.Closeable | undefined
    const startStandby = Effect.gen(function* () {
      scope = yield* Scope.make()
      yield* EmbeddedPostgres.start(standbyServer).pipe(
        Scope.provide(scope),
        Effect.provideService(References.MinimumLogLevel, "Warn"),
        Effect.orDie,
      )
    })
    const stopStandby = Effect.suspend(() => (scope === undefined ? Effect.void : Scope.close(scope, Exit.void)))
    yield* Effect.addFinalizer(() => stopStandby)
    yield* startStandby

    const urlOn = (p: number, name: string) => primary.urlOf(name).replace(`:${primary.port}/`, `:${p}/`)
    const replication = (sync: boolean) =>
      until(
        "the standby streams",
        on(primary.adminUrl, (sql) =>
          sql<{ n: number }>`
            SELECT count(*)::int AS n FROM pg_stat_replication
            WHERE application_name = ${standbyName} AND state = 'streaming'
              AND (sync_state = 'sync' OR NOT ${sync})`.pipe(Effect.map(([r]) => r!.n === 1)),
        ),
      )
    yield* replication(false)
    if (options.synchronous) {
      yield* on(primary.adminUrl, (sql) =>
        sql`ALTER SYSTEM SET synchronous_standby_names = ${sql.literal(`'${standbyName}'`)}`.pipe(
          Effect.andThen(sql`SELECT pg_reload_conf()`),
        ),
      )
      yield* replication(true)
    }

    const killPrimary = Effect.gen(function* () {
      const pid = postmasterOf(primary.dataDir())
      // The postmaster leads its process group (`EmbeddedPostgres`): its backends die with it.
      if (pid !== undefined) process.kill(-pid, "SIGKILL")
      yield* until(
        "the primary is gone",
        Effect.sync(() => postmasterOf(primary.dataDir()) === undefined),
      )
    })
    const promote = on(urlOn(port, "postgres"), (sql) => sql`SELECT pg_promote(true, 60)`).pipe(Effect.asVoid)
    const caughtUp = Effect.gen(function* () {
      const [written] = yield* on(
        primary.adminUrl,
        (sql) => sql<{ lsn: string }>`SELECT pg_current_wal_lsn()::text AS lsn`,
      )
      yield* until(
        "the standby caught up",
        on(urlOn(port, "postgres"), (sql) =>
          sql<{ ok: boolean }>`SELECT pg_last_wal_replay_lsn() >= ${written!.lsn}::pg_lsn AS ok`.pipe(
            Effect.map(([r]) => r?.ok === true),
          ),
        ),
      )
    })
    return {
      primary,
      standbyPort: port,
      bothUrl: (name) =>
        urlOn(primary.port, name).replace(
          `@${primary.host}:${primary.port}/`,
          `@${primary.host}:${primary.port},${primary.host}:${port}/`,
        ),
      standbyUrl: (name) => urlOn(port, name),
      killPrimary,
      stopStandby,
      startStandby,
      promote,
      caughtUp,
    } satisfies Drill
  })
