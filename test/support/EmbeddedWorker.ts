/**
 * `bothy worker` in embedded mode as a child process, for the lifecycle tests: its own home folder
 * and a free port, and what a test needs to check that nothing of it is left afterwards (where the
 * cluster lives, the postmaster's pid, which also names the server's process group).
 */
import { chmodSync, existsSync, readFileSync, rmSync } from "node:fs"
import { join } from "node:path"
import { Effect } from "effect"
import * as EmbeddedServer from "../../testkit/EmbeddedServer.ts"
import * as NodeProcess from "./NodeProcess.ts"

/** A home in the test's own folder, opened to the server's OS user (so the cluster stays in it). */
export const home = Effect.gen(function* () {
  const dir = yield* EmbeddedServer.tempFolder("bothy-cli-")
  chmodSync(dir, 0o755)
  return join(dir, ".bothy")
})

/** The cluster's folder, from the worker's `listening on ... (data in DIR)` line. */
export const dataDirIn = (line: string) => /\(data in (.+?)\)/.exec(line)?.[1] ?? ""

export const postmasterPid = (dataDir: string) =>
  Number(readFileSync(join(dataDir, "postmaster.pid"), "utf8").split("\n")[0])

/** Starts `bothy worker` (or the command `args` name) with `env` in its own process group (as from a terminal). */
export const start = (
  env: Record<string, string>,
  options: NodeProcess.StartOptions = {},
  args: ReadonlyArray<string> = ["worker"],
) =>
  Effect.gen(function* () {
    const port = String(yield* EmbeddedServer.freePort)
    const worker = yield* NodeProcess.start(
      NodeProcess.bothy,
      args,
      { BOTHY_EMBEDDED_PORT: port, ...env },
      { detached: true, ...options },
    )
    return { worker, port }
  })

/** Waits until the worker runs; returns its cluster's folder and the postmaster's pid. */
export const running = (worker: NodeProcess.Running) =>
  Effect.gen(function* () {
    const dataDir = dataDirIn(yield* worker.waitFor(/embedded PostgreSQL 18 listening on/))
    yield* worker.waitFor(/worker running/)
    return { dataDir, postmaster: postmasterPid(dataDir) }
  })

/** Removes a cluster the worker placed outside the test's folder (as root, under /var/lib/bothy). */
export const removeWithScope = (dataDir: string) =>
  Effect.addFinalizer(() => Effect.sync(() => existsSync(dataDir) && rmSync(dataDir, { recursive: true, force: true })))

export const lines = (text: string) => text.split("\n").filter((l) => l.trim().length > 0)
