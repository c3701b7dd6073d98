/**
 * A bothy source tree a benchmark runs: this checkout's, or an earlier commit's extracted next to
 * it, so one benchmark run can measure a case on the code before a change as well (the same-run
 * baseline), on the same server, in the same conditions.
 *
 *   checkout(ref):  git archive of the commit's src/, migrations/ and package.json (or, with
 *                   `whole`, all of it: its own bench/ too, for `TreeBench`) into a temporary
 *                   folder, with node_modules linked to this checkout's (the same packages: Node
 *                   resolves the link to the same files, so `effect` is one module for both); the
 *                   folder is removed when the scope closes
 *   modules(root):  that tree's modules, imported by path
 *
 * The modules are typed as this checkout's: an earlier tree whose API differs fails where the
 * benchmark uses the difference, and the benchmark adapts there. Import `modules` only in a process
 * that loads no other tree's src/ (the backlog driver's child): two trees in one process would
 * define every service twice under the same key.
 */
import { execFileSync } from "node:child_process"
import { existsSync, mkdtempSync, rmSync, symlinkSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { pathToFileURL } from "node:url"
import { Effect, Schema } from "effect"

/** This checkout: the tree whose bench/ is running. */
export const here = resolve(import.meta.dirname, "../..")

export class SourceTreeUnavailable extends Schema.TaggedError<SourceTreeUnavailable>()("SourceTreeUnavailable", {
  /** Where the ref came from: the setting an operator corrects. */
  variable: Schema.String,
  ref: Schema.String,
  detail: Schema.String,
}) {
  override get message() {
    return `${this.variable} = ${JSON.stringify(this.ref)}: cannot check out that bothy tree: ${this.detail}`
  }
}

export interface Checkout {
  /** The commit `ref` named, in full. */
  readonly commit: string
  readonly root: string
}

const git = (args: ReadonlyArray<string>) =>
  execFileSync("git", ["-C", here, ...args], { maxBuffer: 256 * 2 ** 20, stdio: ["ignore", "pipe", "pipe"] })

/** What a checkout extracts: what a driver importing `modules` needs, or the whole tree. */
const parts = (whole: boolean) => (whole ? [] : ["src", "migrations", "package.json"])

/** Extracts `commit`'s tree into a fresh temporary folder and links node_modules; returns the folder. */
const extract = (commit: string, whole: boolean) => {
  const root = mkdtempSync(join(tmpdir(), "bothy-tree-"))
  try {
    execFileSync("tar", ["-x", "-C", root], { input: git(["archive", commit, ...parts(whole)]) })
    symlinkSync(join(here, "node_modules"), join(root, "node_modules"), "dir")
    return root
  } catch (e) {
    rmSync(root, { recursive: true, force: true })
    throw e
  }
}

/**
 * The tree at `ref` (a commit, tag or branch of this repository), removed when the scope closes;
 * `variable` names the setting the ref came from, for the error.
 */
export const checkout = (ref: string, variable: string, options?: { readonly whole?: boolean }) =>
  Effect.acquireRelease(
    Effect.gen(function* () {
      const unavailable = (detail: string) => new SourceTreeUnavailable({ variable, ref, detail })
      const commit = yield* Effect.try({
        try: () =>
          git(["rev-parse", "--verify", "--quiet", `${ref}^{commit}`])
            .toString()
            .trim(),
        catch: () => unavailable("no such commit in this repository"),
      })
      const root = yield* Effect.try({
        try: () => extract(commit, options?.whole === true),
        catch: (e) =>
          unavailable(
            e instanceof Error && "stderr" in e ? `${e.message.split("\n")[0]} ${String(e.stderr).trim()}` : String(e),
          ),
      })
      return { commit, root } satisfies Checkout
    }),
    ({ root }) => Effect.sync(() => rmSync(root, { recursive: true, force: true })),
  )

/** The commit this checkout is at, and whether its work tree has changes, for the conditions. */
export const describeHere = () => ({
  commit: git(["rev-parse", "HEAD"]).toString().trim(),
  changed: git(["status", "--porcelain", "--", "src", "migrations"]).toString().trim().length > 0,
})

/** The modules of src/ a benchmark driver uses, as this checkout types them. */
export interface Modules {
  readonly Consumer: typeof import("../../src/consumer/Consumer.ts")
  readonly EventLog: typeof import("../../src/log/EventLog.ts")
  readonly Jobs: typeof import("../../src/jobs/Jobs.ts")
  readonly JobWorker: typeof import("../../src/jobs/JobWorker.ts")
  readonly Migrations: typeof import("../../src/platform/Migrations.ts")
  readonly NotificationStream: typeof import("../../src/platform/NotificationStream.ts")
  readonly PermissionGrants: typeof import("../../src/authz/PermissionGrants.ts")
  readonly Permissions: typeof import("../../src/authz/Permissions.ts")
  readonly SecretBox: typeof import("../../src/crypto/SecretBox.ts")
  readonly WebhookConfig: typeof import("../../src/webhooks/WebhookConfig.ts")
  readonly WebhookDrainer: typeof import("../../src/webhooks/drain/WebhookDrainer.ts")
  /** In trees before the rename the file is webhooks/Webhooks.ts and its service `Webhooks`. */
  readonly WebhookSubscriptions: typeof import("../../src/webhooks/subscriptions/WebhookSubscriptions.ts")
  readonly WebhookFanOut: typeof import("../../src/webhooks/WebhookFanOut.ts")
  /** `bothy worker`'s composition (src/bin/Worker.ts): what the real worker runs. */
  readonly Worker: typeof import("../../src/bin/Worker.ts")
}

/**
 * Where each module lives in this layout, then where earlier trees had it (renamed, or flat, from
 * before `src/<part>/`); the first that exists is imported.
 */
const paths: Record<keyof Modules, readonly [string, ...Array<string>]> = {
  Consumer: ["consumer/Consumer.ts", "Consumer.ts"],
  EventLog: ["log/EventLog.ts", "EventLog.ts"],
  Jobs: ["jobs/Jobs.ts", "Jobs.ts"],
  JobWorker: ["jobs/JobWorker.ts", "JobWorker.ts"],
  Migrations: ["platform/Migrations.ts", "Migrations.ts"],
  NotificationStream: ["platform/NotificationStream.ts", "NotificationStream.ts"],
  PermissionGrants: ["authz/PermissionGrants.ts", "PermissionGrants.ts"],
  Permissions: ["authz/Permissions.ts", "Permissions.ts"],
  SecretBox: ["crypto/SecretBox.ts", "SecretBox.ts"],
  WebhookConfig: ["webhooks/WebhookConfig.ts", "WebhookConfig.ts"],
  WebhookDrainer: ["webhooks/drain/WebhookDrainer.ts", "webhooks/WebhookDrainer.ts", "WebhookDelivery.ts"],
  WebhookSubscriptions: [
    "webhooks/subscriptions/WebhookSubscriptions.ts",
    "webhooks/WebhookSubscriptions.ts",
    "webhooks/Webhooks.ts",
    "Webhooks.ts",
  ],
  WebhookFanOut: ["webhooks/WebhookFanOut.ts", "WebhooksConsumer.ts"],
  Worker: ["bin/Worker.ts", "bin/Worker.ts"],
}

/** Imports the tree's modules under `root` (a folder holding src/). */
export const modules = (root: string) =>
  Effect.promise(
    async () =>
      Object.fromEntries(
        await Promise.all(
          Object.entries(paths).map(async ([name, candidates]) => {
            const path = candidates.find((c) => existsSync(join(root, "src", c))) ?? candidates[0]
            return [name, await import(pathToFileURL(join(root, "src", path)).href)]
          }),
        ),
      ) as Modules,
  )
