/**
 * Runs a TypeScript entry module as a child process (real signals, real exit codes, SIGKILL), with
 * the Node 24 that runs the tests.
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

export const start = (entry: string, args: ReadonlyArray<string>, env: Record<string, string | undefined>) =>
  Effect.acquireRelease(
    Effect.sync((): Running => {
      const child = spawn(process.execPath, [entry, ...args], {
        env: { ...process.env, DATABASE_URL: undefined, ...env },
        stdio: ["ignore", "pipe", "pipe"],
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
    ({ child }) => Effect.sync(() => child.exitCode === null && child.signalCode === null && child.kill("SIGKILL")),
  )

/** Runs to completion. */
export const run = (entry: string, args: ReadonlyArray<string>, env: Record<string, string | undefined> = {}) =>
  Effect.scoped(Effect.flatMap(start(entry, args, env), (p) => p.exited))
