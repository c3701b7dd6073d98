/**
 * The contract between `bench/run.ts` and a benchmark. A benchmark is a folder `bench/<name>/`
 * whose module `<name>.ts` default-exports a `Benchmark`; the folder holds the benchmark's parts
 * and what only it uses, `bench/harness/` what several share. Adding `bench/consumer/consumer.ts`
 * is all `npm run bench -- consumer` needs.
 *
 * A benchmark gets a fresh, migrated, durable server (`BenchServer`) for its whole run and returns
 * a `Report`; the runner prints it and writes `bench/results/<name>.json`.
 */
import type { Effect, Scope } from "effect"
import type { BenchServer } from "./BenchServer.ts"
import type { Report } from "./Report.ts"

export interface Benchmark {
  /** One line for `npm run bench` without a name. */
  readonly description: string
  readonly run: Effect.Effect<Report, unknown, BenchServer | Scope.Scope>
}

/** Checks the shape of a module's default export, which `import()` cannot type. */
export const isBenchmark = (u: unknown): u is Benchmark =>
  typeof u === "object" && u !== null && "run" in u && "description" in u && typeof u.description === "string"
