/**
 * PgBouncer in front of a PostgreSQL server, as users run bothy behind a pooler: Debian's
 * `pgbouncer` (installed by `.ci/pgbouncer` the first time a machine needs it), a child process
 * with a config of its own in a fresh folder, on a free loopback port, in `transaction` or
 * `session` pool mode, logging in to the server with the server's own user and password.
 *
 * What it keeps true:
 * - Nothing outlives the scope: closing it stops pgbouncer (SIGTERM, then SIGKILL) and removes the
 *   folder.
 * - The URL handed out is only returned once pgbouncer accepts connections on its port.
 * - pgbouncer refuses to run as root, so as root it runs as the embedded server's OS user
 *   (`postgres`), which owns its folder.
 */
import { type ChildProcess, execFile, execFileSync, spawn } from "node:child_process"
import { chownSync, writeFileSync } from "node:fs"
import { connect } from "node:net"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { Effect, Redacted, Schedule } from "effect"
import { freePort, tempFolder } from "./EmbeddedServer.ts"

const script = fileURLToPath(new URL("../.ci/pgbouncer", import.meta.url))

/** pgbouncer's path, from `.ci/pgbouncer` (which installs Debian's package when missing). */
export const executable = Effect.callback<string>((resume) => {
  execFile("bash", [script], { timeout: 600_000 }, (error, stdout, stderr) =>
    resume(error === null ? Effect.succeed(stdout.trim()) : Effect.die(`.ci/pgbouncer failed: ${stderr}`)),
  )
})

/**
 * As root, the OS user the embedded server runs as (`postgres`, which that server's start made),
 * since pgbouncer refuses to run as root; otherwise the current user (`undefined`).
 */
const runAs = (): { readonly uid: number; readonly gid: number } | undefined => {
  if (process.getuid?.() !== 0) return undefined
  const id = (flag: string) => Number(execFileSync("id", [flag, "postgres"], { encoding: "utf8" }).trim())
  return { uid: id("-u"), gid: id("-g") }
}

export type PoolMode = "transaction" | "session"

export interface Target {
  readonly host: string
  readonly port: number
  readonly user: string
  readonly password: Redacted.Redacted
}

export interface Pooler {
  readonly port: number
  readonly mode: PoolMode
  /** URL of the database `name` through the pooler, with credentials. */
  readonly urlOf: (name: string) => string
  /** Everything pgbouncer printed so far. */
  readonly log: () => string
}

const quoted = (s: string) => `"${s.replaceAll('"', '""')}"`

const config = (folder: string, target: Target, port: number, mode: PoolMode) =>
  [
    "[databases]",
    // Every database name a client asks for, on the one server.
    `* = host=${target.host} port=${target.port}`,
    "[pgbouncer]",
    "listen_addr = 127.0.0.1",
    `listen_port = ${port}`,
    "unix_socket_dir =",
    "auth_type = scram-sha-256",
    `auth_file = ${join(folder, "userlist.txt")}`,
    `pool_mode = ${mode}`,
    "max_client_conn = 1000",
    // Per database and user: the connections a pool of a few clients shares.
    "default_pool_size = 20",
    // A dropped test database must not leave servers waiting for it.
    "server_login_retry = 1",
    "log_connections = 0",
    "log_disconnections = 0",
  ].join("\n")

/** Resolves once something accepts connections on 127.0.0.1:`port`. */
const accepting = (port: number) =>
  Effect.callback<void, string>((resume) => {
    const socket = connect(port, "127.0.0.1")
    socket.once("connect", () => {
      socket.destroy()
      resume(Effect.void)
    })
    socket.once("error", (e) => resume(Effect.fail(e.message)))
  }).pipe(Effect.retry({ schedule: Schedule.spaced("50 millis"), times: 200 }), Effect.orDie)

const stop = (child: ChildProcess) =>
  Effect.callback<void>((resume) => {
    if (child.exitCode !== null || child.signalCode !== null) return resume(Effect.void)
    const kill = setTimeout(() => child.kill("SIGKILL"), 5_000)
    child.once("close", () => {
      clearTimeout(kill)
      resume(Effect.void)
    })
    child.kill("SIGTERM")
  })

/** Starts pgbouncer in `mode` in front of `target` for the scope. */
export const start = (target: Target, mode: PoolMode) =>
  Effect.gen(function* () {
    const bin = yield* executable
    const user = yield* Effect.sync(runAs)
    const folder = yield* tempFolder("bothy-pgbouncer-", { open: true })
    const port = yield* freePort
    const files = {
      config: join(folder, "pgbouncer.ini"),
      users: join(folder, "userlist.txt"),
    }
    writeFileSync(files.config, config(folder, target, port, mode), { mode: 0o600 })
    writeFileSync(files.users, `${quoted(target.user)} ${quoted(Redacted.value(target.password))}\n`, {
      mode: 0o600,
    })
    if (user !== undefined) for (const f of [folder, ...Object.values(files)]) chownSync(f, user.uid, user.gid)
    let log = ""
    const child = yield* Effect.acquireRelease(
      Effect.sync(() => {
        const c = spawn(bin, [files.config], { ...(user ?? {}), stdio: ["ignore", "pipe", "pipe"] })
        c.stdout.on("data", (chunk) => {
          log += chunk
        })
        c.stderr.on("data", (chunk) => {
          log += chunk
        })
        return c
      }),
      stop,
    )
    const exited = Effect.callback<never>((resume) => {
      child.once("close", (code) => resume(Effect.die(`pgbouncer exited (${code}) at start: ${log}`)))
    })
    yield* Effect.raceFirst(accepting(port), exited)
    const urlOf = (name: string) =>
      `postgres://${target.user}:${encodeURIComponent(Redacted.value(target.password))}@127.0.0.1:${port}/${name}`
    return { port, mode, urlOf, log: () => log } satisfies Pooler
  })

/** The server a URL with credentials points at (`EmbeddedServer.adminUrl`, `DATABASE_URL_TEST`). */
export const targetOf = (url: string): Target => {
  const u = new URL(url)
  return {
    host: u.hostname,
    port: Number(u.port || "5432"),
    user: decodeURIComponent(u.username),
    password: Redacted.make(decodeURIComponent(u.password)),
  }
}
