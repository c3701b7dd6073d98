/**
 * What one webhook delivery costs in CPU, on this code and on the code before the cost-of-an-event
 * issue, in the same run: the `statements` part (`WebhookStatements`: the end-to-end run at
 * BENCH_WEBHOOK_RATE with the log at BENCH_WEBHOOK_LEAF_DAYS days of hour leaves, pg_stat_statements
 * on) run by each tree's own benchmark in a fresh child process (`TreeBench`), in rotating order,
 * BENCH_WEBHOOK_CPU_REPEATS times each. Per delivery: the worker process (less the producer's
 * thread) and its PostgreSQL backends (less the producer's), apart and together, with the run's
 * end-to-end p95.
 *
 * The earlier tree is BENCH_WEBHOOK_CPU_BASELINE_REF: d9fe02b, whose src/ is that of 4fe565e (the
 * last commit before the first change to src/) and whose bench already has the
 * `statements` part. The end-to-end harness files of this checkout (`harness`) replace its own:
 * they keep the receiver on a thread of its own and the producer's backends findable, so both
 * trees leave the same things out of the count.
 */
import { Config, Console, Effect } from "effect"
import type { Target } from "../harness/Report.ts"
import * as TreeBench from "../harness/TreeBench.ts"
import type * as WebhookStatements from "./WebhookStatements.ts"
import { preloadSettings } from "./WebhookStatements.ts"

export const settings = Config.all({
  repeats: Config.Int("BENCH_WEBHOOK_CPU_REPEATS").pipe(Config.withDefault(3)),
  baselineRef: Config.String("BENCH_WEBHOOK_CPU_BASELINE_REF").pipe(Config.withDefault("d9fe02b")),
})

/** This checkout's measuring code, run by the earlier tree too: what the worker's count leaves out. */
export const harness = [
  "bench/harness/CpuProfile.ts",
  "bench/harness/ProducerThread.ts",
  "bench/harness/ReceiverThread.ts",
  "bench/harness/ThreadMessage.ts",
  "bench/webhooks/WebhookEndToEnd.ts",
  "bench/webhooks/WebhookStatements.ts",
] as const

/** The targets: worker and backends together per delivery, and the end-to-end p95. */
export const cpuTarget = 0.6
export const p95Target = 100

/** The settings a child gets: the statements part alone, at the parent's sizes (smoke sizes included). */
export interface ChildSizes {
  readonly rate: number
  readonly seconds: number
  readonly warmupSeconds: number
  readonly leafDays: number
  readonly historyDeliveries: number
  readonly subscriptions: number
}

const childEnv = (sizes: ChildSizes): Record<string, string> => ({
  BENCH_WEBHOOK_PARTS: "statements",
  BENCH_PG_SETTINGS: preloadSettings,
  BENCH_WEBHOOK_RATE: String(sizes.rate),
  BENCH_WEBHOOK_SECONDS: String(sizes.seconds),
  BENCH_WEBHOOK_WARMUP_SECONDS: String(sizes.warmupSeconds),
  BENCH_WEBHOOK_LEAF_DAYS: String(sizes.leafDays),
  BENCH_WEBHOOK_HISTORY: String(sizes.historyDeliveries),
  BENCH_WEBHOOK_SUBSCRIPTIONS: String(sizes.subscriptions),
})

/** What a run and the medians report per delivery. */
interface Figures {
  readonly workerMs: number
  readonly backendsMs: number
  readonly totalMs: number
  readonly p95Ms: number
  readonly planMsPerDelivery: number
  readonly execMsPerDelivery: number
}

/** One run's figures, from the child's `results.statements`. */
export interface CpuRun extends Figures {
  readonly deliveries: number
  readonly leaves: number
}

const round3 = (n: number) => Math.round(n * 1000) / 1000

const cpuRun = (results: TreeBench.TreeResults): CpuRun => {
  const s = results.results.statements as WebhookStatements.StatementsResult
  const workerMs = s.cpu?.processMsPerEvent ?? Number.NaN
  const backendsMs = s.cpu?.serverMsPerEvent ?? Number.NaN
  return {
    workerMs,
    backendsMs,
    totalMs: round3(workerMs + backendsMs),
    p95Ms: s.latencyP95Ms,
    planMsPerDelivery: s.worker.planMsPerDelivery,
    execMsPerDelivery: s.worker.execMsPerDelivery,
    deliveries: s.deliveries,
    leaves: s.leaves,
  }
}

const figures = [
  "workerMs",
  "backendsMs",
  "totalMs",
  "p95Ms",
  "planMsPerDelivery",
  "execMsPerDelivery",
] as const satisfies ReadonlyArray<keyof Figures>

/** The part: both trees' runs, their medians, the targets on ours and the table's rows. */
export const measure = (sizes: ChildSizes) =>
  Effect.gen(function* () {
    const config = yield* settings
    yield* Console.log(
      `cpu: statements part on this tree and on ${config.baselineRef}, ${config.repeats} repeats each, ${sizes.rate} events/s, ${sizes.leafDays} days of leaves`,
    )
    const trees = yield* TreeBench.oursAndBefore(config.baselineRef, "BENCH_WEBHOOK_CPU_BASELINE_REF", harness)
    const runs = yield* TreeBench.compare(trees, "webhooks", childEnv(sizes), config.repeats)
    const ours = runs.ours.map(cpuRun)
    const before = runs.before.map(cpuRun)
    const o = TreeBench.medians(ours, figures)
    const b = TreeBench.medians(before, figures)
    const row = TreeBench.comparisonRow(ours, before)
    const targets: ReadonlyArray<Target> = [
      {
        name: "cpu: CPU per delivery, worker + backends (ms)",
        value: o.totalMs,
        target: cpuTarget,
        met: o.totalMs <= cpuTarget,
      },
      { name: "cpu: end-to-end p95 (ms)", value: o.p95Ms, target: p95Target, met: o.p95Ms <= p95Target },
    ]
    return {
      results: { cpu: { ours, before, medians: { ours: o, before: b } } },
      baseline: {
        cpu: `the same part on ${trees[1]!.commit} (${config.baselineRef}), its own harness and src/, in the same run`,
      },
      conditions: {
        ...sizes,
        repeats: config.repeats,
        trees: trees.map((t) => ({ label: t.label, commit: t.commit, changed: t.changed ?? false })),
        pgSettings: preloadSettings,
        run: "each run a fresh child process (bench/run.ts webhooks, BENCH_WEBHOOK_PARTS=statements) with an embedded server of its own, the trees in rotating order",
        harness: `the earlier tree runs with this checkout's ${harness.join(", ")}`,
        counted:
          "worker = the process less the producer's and the receiver's threads; backends = the server less the producer's backends (its pool is kept open until they are counted)",
      },
      targets,
      rows: [
        row("CPU per delivery", "ms", (m) => m.totalMs, 3, `<= ${cpuTarget}`),
        row("  worker process", "ms", (m) => m.workerMs, 3),
        row("  its backends", "ms", (m) => m.backendsMs, 3),
        row("  planning (pg_stat_statements)", "ms", (m) => m.planMsPerDelivery, 3),
        row("  execution (pg_stat_statements)", "ms", (m) => m.execMsPerDelivery, 3),
        row("end-to-end p95", "ms", (m) => m.p95Ms, 1, `<= ${p95Target}`),
      ],
    }
  }).pipe(Effect.scoped)
