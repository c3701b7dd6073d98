/**
 * `npm run bench -- <name>` runs the benchmark in `bench/<name>/<name>.ts` (see `harness/Benchmark.ts`) against a
 * fresh durable embedded PostgreSQL, prints its table and writes `bench/results/<name>.json`.
 * Without a name it lists the benchmarks. Ctrl-C interrupts the run; the server still stops.
 *
 * `npm run bench -- <name> --smoke` runs every part at a tiny size (the benchmark's `smoke`
 * settings over the environment) and writes no results: it proves the benchmark still runs and
 * its checks still pass, and its figures mean nothing.
 *
 * Benchmarks are not part of `npm test`: they take minutes and their figures depend on the machine.
 */
import { existsSync, readdirSync } from "node:fs"
import { join } from "node:path"
import { NodeRuntime } from "@effect/platform-node"
import { Config, ConfigProvider, Console, Effect, Schema } from "effect"
import { type Benchmark, isBenchmark, smokeSettings } from "./harness/Benchmark.ts"
import { BenchServer } from "./harness/BenchServer.ts"
import * as Conditions from "./harness/Conditions.ts"
import * as Report from "./harness/Report.ts"

export class UnknownBenchmark extends Schema.TaggedError<UnknownBenchmark>()("UnknownBenchmark", {
  name: Schema.String,
  available: Schema.Array(Schema.String),
}) {
  override get message() {
    return `no benchmark "${this.name}" (bench/${this.name}/${this.name}.ts); available: ${this.available.join(", ")}`
  }
}

// A folder of bench/ holding a module named like itself is a benchmark; bench/harness/ holds what
// more than one of them uses.
const available = readdirSync(import.meta.dirname, { withFileTypes: true })
  .filter((entry) => entry.isDirectory() && /^[a-z][a-z0-9-]*$/.test(entry.name))
  .map((entry) => entry.name)
  .filter((name) => existsSync(join(import.meta.dirname, name, `${name}.ts`)))
  .sort()

const load = (name: string) =>
  Effect.promise(() => import(`./${name}/${name}.ts`)).pipe(
    Effect.flatMap((module: { readonly default?: unknown }) =>
      isBenchmark(module.default)
        ? Effect.succeed(module.default)
        : Effect.die(`bench/${name}/${name}.ts must default-export a Benchmark (see bench/harness/Benchmark.ts)`),
    ),
  )

const list = Effect.forEach(available, (name) =>
  Effect.map(load(name), (bench) => `  ${name.padEnd(12)} ${bench.description}`),
).pipe(Effect.flatMap((lines) => Console.log(["usage: npm run bench -- <name>", ...lines].join("\n"))))

const runOne = (name: string, smoke: boolean) =>
  Effect.gen(function* () {
    if (!available.includes(name)) return yield* new UnknownBenchmark({ name, available })
    const bench = yield* load(name)
    const run = measure(name, bench, smoke)
    yield* smoke ? run.pipe(Effect.provide(smokeConfig(bench))) : run
  })

// The smoke sizes win over the environment; everything else still comes from it.
const smokeConfig = (bench: Benchmark) =>
  ConfigProvider.layer(
    ConfigProvider.orElse(ConfigProvider.fromUnknown({ ...smokeSettings, ...bench.smoke }), ConfigProvider.fromEnv()),
  )

const measure = (name: string, bench: Benchmark, smoke: boolean) =>
  Effect.gen(function* () {
    const date = new Date()
    const atStart = Conditions.machine()
    yield* Effect.scoped(
      Effect.gen(function* () {
        const server = yield* BenchServer
        const storage = yield* Conditions.storage(server.folder)
        yield* Console.log(
          `${name}${smoke ? " (smoke)" : ""}: PostgreSQL ${server.settings.server_version} on port ${server.port}, fsync=${server.settings.fsync}, ` +
            `synchronous_commit=${server.settings.synchronous_commit}; fdatasync ${storage.fdatasyncMs.median} ms (median)`,
        )
        const report = yield* bench.run
        yield* Report.print(report.table)
        if (smoke) {
          yield* Console.log("smoke run: no results written")
        } else {
          const machine = { atStart, atEnd: Conditions.machine() }
          // A second run under other conditions (say TMPDIR on another filesystem) keeps the first's file.
          const as = yield* Config.String("BENCH_RESULT_NAME").pipe(Config.withDefault(name))
          const file = yield* Report.write({ name: as, date, machine, storage, settings: server.settings, report })
          yield* Console.log(`results: ${file}`)
        }
        for (const t of report.targets) {
          yield* Console.log(
            `target ${t.met ? "met" : "NOT met"}: ${t.name} (value ${typeof t.value === "number" ? t.value.toFixed(2) : String(t.value)})`,
          )
        }
      }).pipe(Effect.provide(BenchServer.layer)),
    )
  })

const args = process.argv.slice(2)
const name = args.find((arg) => !arg.startsWith("--"))
const smoke = args.includes("--smoke")
NodeRuntime.runMain(name === undefined ? list : runOne(name, smoke))
