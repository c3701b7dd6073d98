/**
 * A real headless Chromium for the browser tests: Debian's package (installed by `.ci/chromium` the
 * first time a machine needs it, never a browser download of a test tool's own), driven by
 * `playwright-core`, with a fresh profile folder and the flags that keep it off the network it
 * cannot reach (background updates, sync, QUIC). Closed with the scope, profile removed.
 */
import { execFile } from "node:child_process"
import { fileURLToPath } from "node:url"
import { Effect } from "effect"
import { type BrowserContext, chromium } from "playwright-core"
import * as EmbeddedServer from "../../testkit/EmbeddedServer.ts"

const script = fileURLToPath(new URL("../../.ci/chromium", import.meta.url))

/** The browser's path, from `.ci/chromium` (which installs it when missing; about a minute). */
export const executable = Effect.callback<string>((resume) => {
  execFile("bash", [script], { timeout: 600_000 }, (error, stdout, stderr) =>
    resume(error === null ? Effect.succeed(stdout.trim()) : Effect.die(`.ci/chromium failed: ${stderr}`)),
  )
})

const flags = [
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
]

/** A browser with an empty profile for the length of the scope. */
export const launch = Effect.gen(function* () {
  const executablePath = yield* executable
  const profile = yield* EmbeddedServer.tempFolder("bothy-chromium-")
  return yield* Effect.acquireRelease(
    Effect.promise(() => chromium.launchPersistentContext(profile, { executablePath, headless: true, args: flags })),
    (context: BrowserContext) => Effect.promise(() => context.close()),
  )
})
