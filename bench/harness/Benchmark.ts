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
  /**
   * The settings (environment variables the benchmark reads) that make `--smoke` run every part
   * and baseline at a tiny size; they override the environment, on top of `smokeSettings`.
   */
  readonly smoke?: Readonly<Record<string, string>>
}

/** What every smoke run sets: a short window, a shorter warm-up, one repeat. */
export const smokeSettings: Readonly<Record<string, string>> = {
  BENCH_SECONDS: "0.3",
  BENCH_WARMUP_SECONDS: "0.1",
  BENCH_REPEATS: "1",
}

/** Checks the shape of a module's default export, which `import()` cannot type. */
export const isBenchmark = (u: unknown): u is Benchmark =>
  typeof u === "object" && u !== null && "run" in u && "description" in u && typeof u.description === "string"
