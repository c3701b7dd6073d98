/**
 * The package as a host app gets it: built, packed with `npm pack`, installed from the tarball into
 * a scratch app in a temporary folder, type-checked there, and run by Node 24 against an empty
 * database. This is the one test that sees what the others cannot: `files`, `exports`, `bin` and
 * `dependencies` as npm reads them, declarations that resolve from `node_modules`, and a public
 * entry that is enough to migrate, provide the layers and append.
 *
 * Node strips types only outside `node_modules`, so the scratch app's own `app.ts` runs as it is
 * while bothy must arrive as JavaScript. The scratch app installs nothing but the tarball and
 * `@types/node`: `effect` and `@effect/sql-pg` come as bothy's dependencies (hoisted by npm), and
 * it is type-checked with this project's TypeScript. Slow by nature (build, pack, install), so it
 * prints its timings and has its own timeout.
 */
import { execFile } from "node:child_process"
import { mkdir, mkdtemp, readFile, realpath, rm, writeFile } from "node:fs/promises"
import { tmpdir } from "node:os"
import { delimiter, dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import { promisify } from "node:util"
import { assert, layer } from "@effect/vitest"
import { Duration, Effect, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { migrations as registered } from "../../src/platform/Migrations.ts"
import * as HostTsconfig from "../support/HostTsconfig.ts"
import * as TestDatabase from "../support/TestDatabase.ts"

const migrationNames = Object.keys(registered)

const root = fileURLToPath(new URL("../..", import.meta.url))
const execFileAsync = promisify(execFile)

class CommandFailed extends Schema.TaggedError<CommandFailed>()("CommandFailed", {
  command: Schema.String,
  detail: Schema.String,
}) {
  override get message() {
    return `${this.command} failed: ${this.detail}`
  }
}

/**
 * Runs a command to completion with Node 24 (the one running vitest) first in PATH, so `npm`, `tsc`
 * and the `bothy` shim, whose shebangs say `env node`, do not start the system Node. Interrupting
 * the fiber, or the time limit, kills the child.
 */
const run = (
  label: string,
  file: string,
  args: ReadonlyArray<string>,
  options: { readonly cwd: string; readonly env?: Readonly<Record<string, string>> },
) =>
  Effect.tryPromise({
    try: (signal) =>
      execFileAsync(file, args, {
        cwd: options.cwd,
        env: { ...process.env, PATH: `${dirname(process.execPath)}${delimiter}${process.env.PATH}`, ...options.env },
        encoding: "utf8",
        signal,
        timeout: 120_000,
        maxBuffer: 64 * 1024 * 1024,
      }),
    catch: (e) => {
      const out = e as { stdout?: string; stderr?: string }
      return new CommandFailed({
        command: [file, ...args].join(" "),
        detail: `${String(e)}\n--- stdout\n${out.stdout ?? ""}\n--- stderr\n${out.stderr ?? ""}`,
      })
    },
  }).pipe(
    Effect.timed,
    Effect.map(([took, result]) => {
      console.log(`${label}: ${(Duration.toMillis(took) / 1000).toFixed(1)} s`)
      return result
    }),
  )

const ProjectPackage = Schema.fromJsonString(
  Schema.Struct({ devDependencies: Schema.Record(Schema.String, Schema.String) }),
)
const PackResult = Schema.fromJsonString(
  Schema.Array(Schema.Struct({ filename: Schema.String, files: Schema.Array(Schema.Struct({ path: Schema.String })) })),
)
const SourceMap = Schema.fromJsonString(
  Schema.Struct({ sources: Schema.Array(Schema.String), sourcesContent: Schema.Array(Schema.String) }),
)
const AppOutput = Schema.fromJsonString(Schema.Struct({ applied: Schema.Array(Schema.String), seq: Schema.String }))

/** A strict NodeNext app (see `HostTsconfig`) made of one file. */
const scratchTsconfig = { compilerOptions: HostTsconfig.compilerOptions, files: ["app.ts"] }

/** What a host app writes: its own pool, bothy's migrations and `EventLog.layer`, one append. */
const appSource = `import { PgClient } from "@effect/sql-pg"
import { EventLog, Migrations } from "bothy"
import { Config, Effect, Layer } from "effect"

const Database = PgClient.layerConfig({ url: Config.Redacted("DATABASE_URL"), maxConnections: Config.succeed(2) })
const Live = EventLog.layer.pipe(Layer.provideMerge(Database))

const program = Effect.gen(function* () {
  const applied = yield* Migrations.run
  const log = yield* EventLog
  const appended = yield* log.append([
    { space: "scratch", type: "package.installed", actor: "scratch-app", payload: { from: "tarball" } },
  ])
  // In the counter mode (EventLog.layer) the seqs come with the append; sequenced returns them.
  const { firstSeq: seq } = yield* log.sequenced(appended)
  return {
    applied: applied.map(([id, name]) => \`\${String(id).padStart(4, "0")}_\${name}\`),
    seq: String(seq),
  }
})

Effect.runPromise(program.pipe(Effect.provide(Live))).then(
  (result) => console.log(JSON.stringify(result)),
  (error: unknown) => {
    console.error(error)
    process.exitCode = 1
  },
)
`

layer(TestDatabase.layerEmpty(), { excludeTestServices: true })("Package", (it) => {
  it.effect(
    "PackageInstallsIntoScratchApp: the packed tarball installs into a scratch app, type-checks, migrates and appends",
    () =>
      Effect.gen(function* () {
        const db = yield* TestDatabase.TestDatabase
        const sql = yield* SqlClient.SqlClient
        const scratch = yield* Effect.acquireRelease(
          Effect.promise(() => mkdtemp(join(tmpdir(), "bothy-scratch-")).then((dir) => realpath(dir))),
          (dir) => Effect.promise(() => rm(dir, { recursive: true, force: true })),
        )
        const app = join(scratch, "app")

        yield* run("npm run build", "npm", ["run", "build"], { cwd: root })
        const packed = yield* run("npm pack", "npm", ["pack", "--json", "--pack-destination", scratch], { cwd: root })
        const [pack] = yield* Schema.decodeEffect(PackResult)(packed.stdout)
        assert.isDefined(pack)
        const paths = pack.files.map((f) => f.path)
        for (const path of paths) assert.match(path, /^(dist\/(src|migrations)\/|package\.json$|README\.md$)/)
        for (const path of [
          "package.json",
          "dist/src/index.js",
          "dist/src/index.d.ts",
          "dist/src/bin/bothy.js",
          "dist/migrations/0001_event_log.js",
        ]) {
          assert.include(paths, path)
        }

        const project = yield* Effect.promise(() => readFile(join(root, "package.json"), "utf8"))
        const typesNode = (yield* Schema.decodeEffect(ProjectPackage)(project)).devDependencies["@types/node"]
        assert.isDefined(typesNode)
        yield* Effect.promise(async () => {
          await mkdir(app)
          await writeFile(join(app, "package.json"), `${JSON.stringify({ private: true, type: "module" })}\n`)
          await writeFile(join(app, "tsconfig.json"), `${JSON.stringify(scratchTsconfig, null, 2)}\n`)
          await writeFile(join(app, "app.ts"), appSource)
        })
        yield* run(
          "npm install (tarball, from the npm cache)",
          "npm",
          [
            "install",
            join(scratch, pack.filename),
            `@types/node@${typesNode}`,
            "--save-exact",
            "--prefer-offline",
            "--no-audit",
            "--no-fund",
          ],
          { cwd: app },
        )

        // The sources are not shipped, so each source map must carry them (`inlineSources`).
        for (const path of paths.filter((p) => p.endsWith(".js.map"))) {
          const text = yield* Effect.promise(() => readFile(join(app, "node_modules", "bothy", path), "utf8"))
          const map = yield* Schema.decodeEffect(SourceMap)(text)
          assert.strictEqual(map.sourcesContent.length, map.sources.length, path)
        }

        // Type-check with this project's compiler; every declaration must come from the scratch
        // app's node_modules (only TypeScript's own lib files live elsewhere).
        const tsc = yield* run(
          "tsc (scratch app)",
          join(root, "node_modules", ".bin", "tsc"),
          ["-p", join(app, "tsconfig.json"), "--listFiles"],
          { cwd: app },
        )
        const files = tsc.stdout.split("\n").filter((line) => line.length > 0)
        for (const entry of ["bothy/dist/src/index.d.ts", "effect/dist/index.d.ts", "@effect/sql-pg/dist/index.d.ts"]) {
          assert.include(files, join(app, "node_modules", entry))
        }
        assert.deepStrictEqual(
          files.filter((f) => !f.startsWith(`${app}/`) && !/\/lib\.[\w.]+\.d\.ts$/.test(f)),
          [],
        )

        const first = yield* run("app.ts (empty database)", process.execPath, ["app.ts"], {
          cwd: app,
          env: { DATABASE_URL: db.url },
        })
        assert.deepStrictEqual(yield* Schema.decodeEffect(AppOutput)(first.stdout), {
          applied: migrationNames,
          seq: "1",
        })
        const second = yield* run("app.ts (migrated database)", process.execPath, ["app.ts"], {
          cwd: app,
          env: { DATABASE_URL: db.url },
        })
        assert.deepStrictEqual(yield* Schema.decodeEffect(AppOutput)(second.stdout), { applied: [], seq: "2" })

        const events = yield* sql<{ seq: bigint; space: string; type: string; actor: string; payload: unknown }>`
          SELECT seq, space_id AS space, type, actor, payload FROM event_log ORDER BY seq`
        const appended = {
          space: "scratch",
          type: "package.installed",
          actor: "scratch-app",
          payload: { from: "tarball" },
        }
        assert.deepStrictEqual(
          events.map((e) => ({ ...e })),
          [
            { seq: 1n, ...appended },
            { seq: 2n, ...appended },
          ],
        )
        const migrations = yield* sql<{ id: number; name: string }>`
          SELECT migration_id AS id, name FROM bothy_migrations ORDER BY migration_id`
        assert.deepStrictEqual(
          migrations.map((m) => ({ ...m })),
          migrationNames.map((m) => ({ id: Number(m.slice(0, 4)), name: m.slice(5) })),
        )

        const help = yield* run(
          "bothy --help (installed bin)",
          join(app, "node_modules", ".bin", "bothy"),
          ["--help"],
          {
            cwd: app,
          },
        )
        assert.include(help.stdout, "USAGE")
        assert.include(help.stdout, "migrate")
      }),
    180_000,
  )
})
