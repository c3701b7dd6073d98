/**
 * Which bothy process started the embedded server on a data folder, so that a server left behind
 * by a bothy that died without its finalizers (a `kill -9`, an out-of-memory kill) does not stop
 * every later start.
 *
 * Once its server is ready, bothy writes `<data folder>.owner`: its own pid and process start
 * time, and the postmaster's pid; it removes the file after stopping the server. A later start that
 * finds a live postmaster on the folder reads the file:
 *
 *   no file, or another postmaster pid ──> not ours to touch: refuse, naming the pid
 *   owner alive (same pid, same start time) ──> another bothy runs here: refuse
 *   owner gone (pid dead, or reused: another start time) ──> left behind: stop it, then start
 *
 * The start time tells a reused pid apart from the owner (Linux: `/proc/<pid>/stat`); elsewhere
 * the pid alone is judged.
 */
import { existsSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { Duration, Effect, Schema } from "effect"

const Owner = Schema.Struct({ pid: Schema.Int, startedAt: Schema.NullOr(Schema.String), postmaster: Schema.Int })
type Owner = typeof Owner.Type

const decodeOwner = Schema.decodeUnknownOption(Schema.fromJsonString(Owner))

const fileOf = (dataDir: string) => `${dataDir}.owner`

/** The process's start time as the kernel counts it, or null where `/proc` does not tell. */
const startTimeOf = (pid: number): string | null => {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
    // The fields after the command name (which may hold spaces and parentheses); 22nd is starttime.
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19] ?? null
  } catch {
    return null
  }
}

export const isAlive = (pid: number) => {
  if (!Number.isInteger(pid) || pid <= 0) return false
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

/** Records this process as the owner of `postmaster` on `dataDir`. */
export const record = (dataDir: string, postmaster: number) =>
  Effect.try(() => {
    const owner: Owner = { pid: process.pid, startedAt: startTimeOf(process.pid), postmaster }
    writeFileSync(fileOf(dataDir), `${JSON.stringify(owner)}\n`, { mode: 0o644 })
  }).pipe(Effect.catch((e) => Effect.logWarning(`could not record the embedded server's owner: ${String(e)}`)))

export const forget = (dataDir: string) => Effect.sync(() => rmSync(fileOf(dataDir), { force: true }))

export type Judgement =
  | { readonly _tag: "Foreign" }
  | { readonly _tag: "Owned"; readonly owner: number }
  | { readonly _tag: "LeftBehind"; readonly owner: number }

/** Whose is the live `postmaster` on `dataDir` (see the module header). */
export const judge = (dataDir: string, postmaster: number): Judgement => {
  const file = fileOf(dataDir)
  const owner = existsSync(file) ? decodeOwner(readFileSync(file, "utf8")) : undefined
  if (owner === undefined || owner._tag === "None" || owner.value.postmaster !== postmaster) return { _tag: "Foreign" }
  const { pid, startedAt } = owner.value
  const same = isAlive(pid) && (startedAt === null || startTimeOf(pid) === startedAt)
  return same ? { _tag: "Owned", owner: pid } : { _tag: "LeftBehind", owner: pid }
}

const exitsWithin = (pid: number, within: Duration.Duration) =>
  Effect.gen(function* () {
    const rounds = Math.ceil(Duration.toMillis(within) / 100)
    for (let i = 0; i < rounds; i++) {
      if (!isAlive(pid)) return true
      yield* Effect.sleep(Duration.millis(100))
    }
    return !isAlive(pid)
  })

/**
 * Stops a server left behind, as its owner would have: SIGINT (fast shutdown), then SIGQUIT, then
 * SIGKILL to its process group. Not its parent, this process cannot wait for its exit: it watches
 * the pid instead.
 */
export const stopLeftBehind = (
  postmaster: number,
  waits: { readonly sigint: Duration.Duration; readonly sigquit: Duration.Duration },
) =>
  Effect.gen(function* () {
    const signal = (s: NodeJS.Signals, pid = postmaster) => {
      try {
        process.kill(pid, s)
      } catch {
        // Gone already.
      }
    }
    signal("SIGINT")
    if (yield* exitsWithin(postmaster, waits.sigint)) return
    signal("SIGQUIT")
    if (yield* exitsWithin(postmaster, waits.sigquit)) return
    signal("SIGKILL", -postmaster)
    yield* exitsWithin(postmaster, Duration.seconds(5))
  })
