/**
 * The package as npm ships it: `npm pack` into a temporary folder from a tree with no `dist/`, so
 * the tarball holds what the `prepack` build made (a fresh clone has no `dist/` either), once per
 * test file, with the file list npm reports. Commands run to completion with the Node 24 that runs
 * vitest first in PATH, so `npm`, `tsc` and the `bothy` shim (whose shebangs say `env node`) do not
 * start the system Node; interrupting the fiber, or the time limit, kills the child.
 */
import { execFile } from "node:child_process"
import { mkdtemp, readFile, realpath, rm } from "node:fs/promises"
import { tmpdir } from "node:os"
import { delimiter, dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import { promisify } from "node:util"
import { Context, Duration, Effect, Layer, Schema } from "effect"

export const root = fileURLToPath(new URL("../..", import.meta.url))
const execFileAsync = promisify(execFile)

export class CommandFailed extends Schema.TaggedError<CommandFailed>()("CommandFailed", {
  command: Schema.String,
  detail: Schema.String,
}) {
  override get message() {
    return `${this.command} failed: ${this.detail}`
  }
}

export interface RunOptions {
  readonly cwd: string
  readonly env?: Readonly<Record<string, string>>
}

/** Runs `file` to completion and prints how long it took under `label`. */
export const run = (label: string, file: string, args: ReadonlyArray<string>, options: RunOptions) =>
  Effect.tryPromise({
    try: (signal) =>
      execFileAsync(file, args, {
        cwd: options.cwd,
        env: { ...process.env, PATH: `${dirname(process.execPath)}${delimiter}${process.env.PATH}`, ...options.env },
        encoding: "utf8",
        signal,
        timeout: 150_000,
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

/** The fields of this project's package.json the packaging tests read. */
export const ProjectPackage = Schema.fromJsonString(
  Schema.Struct({
    version: Schema.String,
    devDependencies: Schema.Record(Schema.String, Schema.String),
    peerDependencies: Schema.Record(Schema.String, Schema.String),
    peerDependenciesMeta: Schema.Record(Schema.String, Schema.Struct({ optional: Schema.Boolean })),
  }),
)
export type ProjectPackage = typeof ProjectPackage.Type

export const readProjectPackage = Effect.promise(() => readFile(join(root, "package.json"), "utf8")).pipe(
  Effect.flatMap(Schema.decodeEffect(ProjectPackage)),
  Effect.orDie,
)

const PackResult = Schema.fromJsonString(
  Schema.Array(Schema.Struct({ filename: Schema.String, files: Schema.Array(Schema.Struct({ path: Schema.String })) })),
)

export class PackedTarball extends Context.Service<
  PackedTarball,
  {
    /** A temporary folder holding the tarball, for scratch apps beside it. */
    readonly dir: string
    readonly tarball: string
    /** Every path in the tarball, as `npm pack` lists them. */
    readonly paths: ReadonlyArray<string>
  }
>()("test/PackedTarball") {
  static readonly layer = Layer.effect(
    PackedTarball,
    Effect.gen(function* () {
      const dir = yield* Effect.acquireRelease(
        Effect.promise(() => mkdtemp(join(tmpdir(), "bothy-pack-")).then((d) => realpath(d))),
        (d) => Effect.promise(() => rm(d, { recursive: true, force: true })),
      )
      yield* Effect.promise(() => rm(join(root, "dist"), { recursive: true, force: true }))
      const packed = yield* run("npm pack", "npm", ["pack", "--json", "--pack-destination", dir], { cwd: root })
      const [pack] = yield* Schema.decodeEffect(PackResult)(packed.stdout)
      if (pack === undefined) return yield* Effect.die(`npm pack listed no tarball: ${packed.stdout}`)
      return { dir, tarball: join(dir, pack.filename), paths: pack.files.map((f) => f.path) }
    }).pipe(Effect.orDie),
  )
}
