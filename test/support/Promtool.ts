/**
 * Prometheus's `promtool`, fetched by `.ci/promtool` (Debian's `prometheus` package, extracted
 * into /var/cache/bothy, never installed) the first time a test needs it on a machine.
 */
import { execFile, spawn } from "node:child_process"
import { fileURLToPath } from "node:url"
import { Effect } from "effect"

const script = fileURLToPath(new URL("../../.ci/promtool", import.meta.url))

let path: Promise<string> | undefined

/** The binary's path, fetching it once per test process when the cache has none. */
export const binary = Effect.promise(() => {
  path ??= new Promise<string>((resolve, reject) =>
    execFile("bash", [script], { timeout: 300_000 }, (error, stdout, stderr) =>
      error === null ? resolve(stdout.trim()) : reject(new Error(`.ci/promtool failed: ${stderr}`)),
    ),
  )
  return path
})

export interface Result {
  readonly code: number | null
  readonly output: string
}

/** Runs `promtool ARGS` (with `stdin` piped in, if given) in `cwd`; its output is stdout and stderr together. */
export const run = (args: ReadonlyArray<string>, options: { readonly stdin?: string; readonly cwd?: string } = {}) =>
  Effect.flatMap(binary, (bin) =>
    Effect.callback<Result>((resume) => {
      const child = spawn(bin, args, { cwd: options.cwd, stdio: ["pipe", "pipe", "pipe"] })
      let output = ""
      child.stdout.on("data", (chunk) => {
        output += chunk
      })
      child.stderr.on("data", (chunk) => {
        output += chunk
      })
      child.on("close", (code) => resume(Effect.succeed({ code, output })))
      child.stdin.end(options.stdin ?? "")
    }),
  )
