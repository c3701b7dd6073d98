/**
 * A process of the embedded server (`initdb`, `postgres`), started in its own process group as the
 * server's OS user: a terminal's SIGINT to bothy's group does not reach it, and bothy can stop it
 * together with every process it started (the postmaster's backends, initdb's bootstrap backend).
 * Its stderr is read as it comes, so it never blocks on a full pipe, and the last lines are kept for
 * error messages. How it ended is a promise that never rejects, so nothing waits for an exit that
 * already happened.
 */
import { type ChildProcess, spawn } from "node:child_process"
import * as EmbeddedServerUser from "./EmbeddedServerUser.ts"

export interface Ended {
  readonly code: number | null
  readonly signal: NodeJS.Signals | null
  /** Set when the process could not be started at all (e.g. EACCES). */
  readonly error?: Error
}

export const describeEnd = (end: Ended) =>
  end.error !== undefined
    ? end.error.message
    : end.signal !== null
      ? `killed by ${end.signal}`
      : `exit code ${end.code}`

/** A child process with its last lines of stderr, and how it ended (a promise that never rejects). */
export interface Watched {
  readonly child: ChildProcess
  readonly ended: Promise<Ended>
  readonly hasEnded: () => boolean
  readonly recentLog: () => string
}

const watch = (child: ChildProcess, until: "exit" | "close"): Watched => {
  const lines: Array<string> = []
  let partial = ""
  child.stderr?.setEncoding("utf8").on("data", (chunk: string) => {
    const parts = (partial + chunk).split("\n")
    partial = parts.pop() ?? ""
    for (const line of parts.map((l) => l.trim()).filter((l) => l.length > 0)) {
      lines.push(line)
      if (lines.length > 20) lines.shift()
    }
  })
  let done = false
  const ended = new Promise<Ended>((resolve) => {
    child.once("error", (error) => resolve({ code: null, signal: null, error }))
    child.once(until, (code: number | null, signal: NodeJS.Signals | null) => resolve({ code, signal }))
  }).then((end) => {
    done = true
    return end
  })
  return {
    child,
    ended,
    hasEnded: () => done,
    recentLog: () =>
      [...lines, partial.trim()]
        .filter((l) => l.length > 0)
        .slice(-5)
        .join(" | "),
  }
}

/**
 * Starts `file` as `user` in a process group of its own, with English messages (a failed start's
 * cause is read from them). `until`: `exit` for the postmaster (its backends keep stderr open after
 * it died), `close` for a process whose whole output matters.
 */
export const start = (
  file: string,
  args: ReadonlyArray<string>,
  user: EmbeddedServerUser.ServerUser,
  until: "exit" | "close",
): Watched =>
  watch(
    spawn(file, args, {
      ...EmbeddedServerUser.spawnAs(user),
      detached: true,
      env: { ...process.env, LC_MESSAGES: "C" },
      stdio: ["ignore", "ignore", "pipe"],
    }),
    until,
  )

/** SIGKILL to every process of the group led by `pid`. */
export const killGroup = (pid: number | undefined) => {
  if (pid === undefined) return
  try {
    process.kill(-pid, "SIGKILL")
  } catch {
    // The group is empty already.
  }
}
