/**
 * Runs a TypeScript entry module as a child process (real signals, real exit codes, SIGKILL), with
 * the Node 24 that runs the tests. A `detached` child leads its own process group, as a command
 * started from a terminal does, so a test can signal the whole group the way Ctrl-C does; whatever
 * is left of the group when the scope closes is killed.
 */
import { type ChildProcess, spawn } from "node:child_process"
import { fileURLToPath } from "node:url"
import { Effect } from "effect"

/** The `bothy` command. */
export const bothy = fileURLToPath(new URL("../../src/bin/bothy.ts", import.meta.url))

export interface Finished {
  readonly code: number | null
  readonly signal: NodeJS.Signals | null
  readonly stdout: string
  readonly stderr: string
}

export interface Running {
  readonly child: ChildProcess
  /** Resolves with the `count`-th line of output that matches (the first by default). */
  readonly waitFor: (pattern: RegExp, count?: number) => Effect.Effect<string>
  /** Standard output so far. */
  readonly stdout: () => string
  readonly exited: Effect.Effect<Finished>
}

export interface StartOptions {
  /** Its own process group (its pid is the group's id). */
  readonly detached?: boolean
  readonly cwd?: string
}

export const start = (
  entry: string,
  args: ReadonlyArray<string>,
  env: Record<string, string | undefined>,
  options: StartOptions = {},
) =>
  Effect.acquireRelease(
    Effect.sync((): Running => {
      const child = spawn(process.execPath, [entry, ...args], {
        // Any free port for a worker's metrics: the default one is shared by every test (and machine user).
        env: {
          ...process.env,
          DATABASE_URL: undefined,
          BOTHY_METRICS_ADDRESS: "127.0.0.1:0",
          BOTHY_ADMIN_ADDRESS: "127.0.0.1:0",
          ...env,
        },
        stdio: ["ignore", "pipe", "pipe"],
        detached: options.detached === true,
        ...(options.cwd === undefined ? {} : { cwd: options.cwd }),
      })
      let stdout = ""
      let stderr = ""
      const waiters: Array<{ pattern: RegExp; count: number; resolve: (line: string) => void }> = []
      const check = () => {
        for (const w of [...waiters]) {
          const line = `${stdout}\n${stderr}`.split("\n").filter((l) => w.pattern.test(l))[w.count - 1]
          if (line !== undefined) {
            waiters.splice(waiters.indexOf(w), 1)
            w.resolve(line)
          }
        }
      }
      child.stdout.on("data", (chunk) => {
        stdout += chunk
        check()
      })
      child.stderr.on("data", (chunk) => {
        stderr += chunk
        check()
      })
      const exit = new Promise<Finished>((resolve) =>
        child.on("close", (code, signal) => resolve({ code, signal, stdout, stderr })),
      )
      return {
        child,
        stdout: () => stdout,
        waitFor: (pattern, count = 1) =>
          Effect.callback<string>((resume) => {
            waiters.push({ pattern, count, resolve: (line) => resume(Effect.succeed(line)) })
            check()
          }).pipe(
            Effect.raceFirst(
              Effect.promise(() => exit).pipe(
                Effect.flatMap((f) => Effect.die(`bothy exited (${f.code}) before printing ${pattern}: ${f.stderr}`)),
              ),
            ),
          ),
        exited: Effect.promise(() => exit),
      }
    }),
    ({ child }) =>
      Effect.sync(() => {
        if (options.detached === true && child.pid !== undefined) killGroup(child.pid)
        else if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL")
      }),
  )

/** Whether any process of the group `pgid` is still alive. */
export const groupAlive = (pgid: number) => {
  try {
    process.kill(-pgid, 0)
    return true
  } catch {
    return false
  }
}

const killGroup = (pgid: number) => {
  try {
    process.kill(-pgid, "SIGKILL")
  } catch {
    // Nothing left of it.
  }
}

/** Runs to completion. */
export const run = (entry: string, args: ReadonlyArray<string>, env: Record<string, string | undefined> = {}) =>
  Effect.scoped(Effect.flatMap(start(entry, args, env), (p) => p.exited))

/** The `bothy` command with `env`: each call runs it to the end, dies unless it exits 0, and gives its stdout. */
export const cli =
  (env: Record<string, string | undefined>) =>
  (...args: Array<string>) =>
    Effect.flatMap(run(bothy, args, env), (done) =>
      done.code === 0
        ? Effect.succeed(done.stdout)
        : Effect.die(`bothy ${args.join(" ")} exited ${done.code}: ${done.stderr}`),
    )
