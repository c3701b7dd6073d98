/**
 * The documentation's TypeScript as a newcomer pastes it into a host app: every ```ts block of
 * README.md and of the pages of docs/ becomes a module of a scratch app and is type-checked there
 * with this project's `tsc` under a strict host's settings (`HostTsconfig`), so the docs cannot
 * drift from the API. A block that fails is reported at its file and line with tsc's message.
 * Blocks marked `run` are also run, README.md's first and then the pages' in alphabetical order,
 * against one empty database; blocks marked `fragment` are not compiled.
 *
 * The scratch app's `node_modules/bothy` is this checkout built with `tsconfig.build.json` into a
 * folder of its own (the shared `dist/` is rebuilt meanwhile by the packaging test) beside a copy
 * of package.json, so `bothy` resolves through `exports` exactly as it does in a host app. The
 * packages a host has beside it (bothy's dependencies, its required peers and `@types/node`) are links into this
 * checkout's node_modules. Installing the real tarball is `Package.test.ts`'s job.
 */
import { copyFile, mkdir, mkdtemp, readdir, readFile, realpath, rm, symlink, writeFile } from "node:fs/promises"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import { assert, layer } from "@effect/vitest"
import { Context, Effect, Layer, Schema } from "effect"
import * as CodeBlocks from "../support/CodeBlocks.ts"
import * as HostTsconfig from "../support/HostTsconfig.ts"
import * as NodeProcess from "../support/NodeProcess.ts"
import * as TestDatabase from "../support/TestDatabase.ts"

const root = fileURLToPath(new URL("../..", import.meta.url))
const tsc = join(root, "node_modules", ".bin", "tsc")

const ProjectPackage = Schema.fromJsonString(
  Schema.Struct({
    dependencies: Schema.Record(Schema.String, Schema.String),
    peerDependencies: Schema.Record(Schema.String, Schema.String),
    peerDependenciesMeta: Schema.Record(Schema.String, Schema.Struct({ optional: Schema.Boolean })),
  }),
)

/** Runs `tsc` to its end; a failure to build the package is not the README's fault, so it dies. */
const build = (args: ReadonlyArray<string>) =>
  Effect.flatMap(NodeProcess.run(tsc, args), (done) =>
    done.code === 0
      ? Effect.void
      : Effect.die(`tsc ${args.join(" ")} exited ${done.code}:\n${done.stdout}${done.stderr}`),
  )

class ScratchApp extends Context.Service<ScratchApp, { readonly dir: string }>()("test/ScratchApp") {
  static readonly layer = Layer.effect(
    ScratchApp,
    Effect.gen(function* () {
      const dir = yield* Effect.acquireRelease(
        Effect.promise(() => mkdtemp(join(tmpdir(), "bothy-readme-")).then((d) => realpath(d))),
        (d) => Effect.promise(() => rm(d, { recursive: true, force: true })),
      )
      const bothy = join(dir, "node_modules", "bothy")
      yield* build(["-p", join(root, "tsconfig.build.json"), "--outDir", join(bothy, "dist")])
      const project = yield* Effect.promise(() => readFile(join(root, "package.json"), "utf8"))
      const { dependencies, peerDependencies, peerDependenciesMeta } =
        yield* Schema.decodeEffect(ProjectPackage)(project)
      // A host brings the required peers itself (Effect's packages); optional ones it may leave out.
      const peers = Object.keys(peerDependencies).filter((name) => peerDependenciesMeta[name]?.optional !== true)
      const hosted = [...Object.keys(dependencies), ...peers, "@types/node"]
      yield* Effect.promise(async () => {
        await copyFile(join(root, "package.json"), join(bothy, "package.json"))
        for (const name of hosted) {
          await mkdir(dirname(join(dir, "node_modules", name)), { recursive: true })
          await symlink(join(root, "node_modules", name), join(dir, "node_modules", name), "dir")
        }
        await writeFile(join(dir, "package.json"), `${JSON.stringify({ private: true, type: "module" })}\n`)
      })
      return { dir }
    }),
  )
}

/** Writes the blocks (all but fragments) as modules of `folder` in the scratch app; returns their paths. */
const writeBlocks = (folder: string, blocks: ReadonlyArray<CodeBlocks.CodeBlock>) =>
  Effect.promise(async () => {
    await mkdir(folder, { recursive: true })
    const written = blocks.filter((b) => !b.markers.includes("fragment"))
    for (const block of written) await writeFile(join(folder, CodeBlocks.fileName(block)), block.code)
    return written.map((b) => join(folder, CodeBlocks.fileName(b)))
  })

/** Type-checks a Markdown document's blocks in the scratch app; returns what is wrong, located. */
const typeCheck = (document: string, markdown: string) =>
  Effect.gen(function* () {
    const { dir } = yield* ScratchApp
    const folder = join(dir, `check-${document.replace(/\W/g, "-")}`)
    const { blocks, problems } = CodeBlocks.extract(document, markdown)
    const files = yield* writeBlocks(folder, blocks)
    if (files.length === 0) return { compiled: 0, failures: problems }
    // `force`: a block without an import is still a module of its own, not a script whose names
    // would collide with the other blocks'.
    const tsconfig = { compilerOptions: { ...HostTsconfig.compilerOptions, moduleDetection: "force" }, files }
    yield* Effect.promise(() => writeFile(join(folder, "tsconfig.json"), `${JSON.stringify(tsconfig, null, 2)}\n`))
    const done = yield* NodeProcess.run(tsc, ["-p", join(folder, "tsconfig.json"), "--pretty", "false"])
    const located = CodeBlocks.locate(document, `${done.stdout}\n${done.stderr}`)
    const silent = done.code !== 0 && located.length === 0 ? [`tsc exited ${done.code} without a message`] : []
    return { compiled: files.length, failures: [...problems, ...located, ...silent] }
  })

const readme = Effect.promise(() => readFile(join(root, "README.md"), "utf8"))

/** README.md, then every page of docs/ in alphabetical order, each with its path from the root. */
const documents = Effect.promise(async () => {
  const pages = (await readdir(join(root, "docs"))).filter((name) => name.endsWith(".md")).sort()
  const paths = ["README.md", ...pages.map((name) => `docs/${name}`)]
  return Promise.all(paths.map(async (path) => ({ path, markdown: await readFile(join(root, path), "utf8") })))
})

layer(Layer.merge(TestDatabase.layerEmpty(), ScratchApp.layer), { excludeTestServices: true })(
  "ReadmeExamples",
  (it) => {
    it.effect(
      "ReadmeExamplesCompile: every ts block of README.md and of docs/*.md type-checks against the built package",
      () =>
        Effect.gen(function* () {
          const failures: Array<string> = []
          const compiled = new Map<string, number>()
          for (const { path, markdown } of yield* documents) {
            const checked = yield* typeCheck(path, markdown)
            compiled.set(path, checked.compiled)
            failures.push(...checked.failures)
          }
          if (failures.length > 0) assert.fail(`blocks that do not compile:\n\n${failures.join("\n\n")}`)
          assert.isAbove(compiled.get("README.md")!, 0, "README.md has its example")
          assert.isAbove(
            [...compiled].filter(([path]) => path.startsWith("docs/")).reduce((n, [, c]) => n + c, 0),
            0,
            "docs/ has examples",
          )
        }),
      600_000,
    )

    it.effect(
      "ReadmeExamplesCompile: a broken block fails with its line in the document and tsc's message",
      () =>
        Effect.gen(function* () {
          const markdown = [
            "# Broken", // 1
            "",
            "```ts",
            'import { Effect } from "effect"',
            "export const fine = Effect.succeed(1)",
            "```",
            "",
            "```sh",
            "not TypeScript, never compiled",
            "```", // 10
            "",
            "```ts",
            "export const missingImport = 1",
            "export const broken = Effect.succeed(missingImport)",
            "```",
            "",
            "```ts fragment",
            "a piece that is not compiled",
            "```",
            "", // 20
            "```ts fragmnet",
            "export const misspelt = 1",
            "```",
            "",
          ].join("\n")
          const { compiled, failures } = yield* typeCheck("BROKEN.md", markdown)
          assert.strictEqual(compiled, 2)
          assert.deepStrictEqual(failures, [
            'BROKEN.md:21: unknown marker "fragmnet" (known: fragment, run)',
            "BROKEN.md:14:23 (block at line 12): error TS2304: Cannot find name 'Effect'.",
          ])
        }),
      120_000,
    )

    it.effect(
      "ReadmeExamplesCompile: the run blocks of README.md and docs/*.md run to exit 0, in order, against an empty database",
      () =>
        Effect.gen(function* () {
          const { dir } = yield* ScratchApp
          const db = yield* TestDatabase.TestDatabase
          const readmeRuns = CodeBlocks.extract("README.md", yield* readme).blocks.filter((b) =>
            b.markers.includes("run"),
          )
          assert.isAbove(readmeRuns.length, 0)
          const failures: Array<string> = []
          for (const { path, markdown } of yield* documents) {
            const runnable = CodeBlocks.extract(path, markdown).blocks.filter((b) => b.markers.includes("run"))
            const files = yield* writeBlocks(join(dir, "run", path.replace(/\W/g, "-")), runnable)
            for (const [i, file] of files.entries()) {
              const done = yield* NodeProcess.run(file, [], { DATABASE_URL: db.url })
              if (done.code !== 0) {
                failures.push(`${path}:${runnable[i]!.fence}: exited ${done.code}\n${done.stdout}${done.stderr}`)
              }
            }
          }
          if (failures.length > 0) assert.fail(`run blocks that failed:\n\n${failures.join("\n\n")}`)
        }),
      300_000,
    )
  },
)
