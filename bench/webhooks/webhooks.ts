/**
 * `npm run bench -- webhooks`: outgoing webhooks, in six parts.
 *
 *   1. End to end (`WebhookEndToEnd.ts`): from an event's commit to its request arriving at a local
 *      receiver, at BENCH_WEBHOOK_RATE events/s for BENCH_WEBHOOK_SECONDS over
 *      BENCH_WEBHOOK_SUBSCRIPTIONS subscriptions (each event matches exactly one): deliveries/s,
 *      latency percentiles, whether the backlog stayed flat, where the time goes. Once per
 *      BENCH_REPEATS. Target from the issue: p95 <= 100 ms.
 *   2. The `webhooks` round alone (`WebhookRounds.ts`): BENCH_WEBHOOK_ROUND_SUBSCRIPTIONS active
 *      subscriptions, each event matching 1% of them, a backlog drained by `Consumer.makeRound`
 *      rounds: events/s, deliveries and jobs created/s, next to the same round with no
 *      subscriptions (the baseline) and with subscriptions none of which match (diagnostic), in a
 *      rotating order, BENCH_WEBHOOK_ROUND_REPEATS times; and `EXPLAIN ANALYZE` of the matching
 *      CTE, to show that matching goes through the index on spaces. Target: it does.
 *   3. The backlog (`WebhookBacklog.ts`): deliveries already pending (one subscription with
 *      10,000, ten with 5,000 each, by default) drained by the job worker as `bothy worker` runs
 *      it to a local keep-alive receiver: deliveries/s from the worker's start until all are on
 *      record, BENCH_WEBHOOK_BACKLOG_REPEATS times, next to the same cases on the code before
 *      the drainer (BENCH_WEBHOOK_BACKLOG_BASELINE_REF, checked out for the run), each run in a
 *      fresh child process with the tree's own modules and schema. Targets: >= 500/s for one
 *      subscription, >= 1,500/s for ten together.
 *   4. The cost of telemetry (`WebhookTelemetryCost.ts`): the end-to-end run with metrics
 *      and tracing off against on, alternating, BENCH_WEBHOOK_TELEMETRY_REPEATS times each: CPU
 *      per event of the worker process and its PostgreSQL backends. Target: on / off <= 1.1.
 *   5. The cost of a delivery (`WebhookCpu.ts`): the `statements` part (6) on this tree and on
 *      the code before the cost-of-an-event issue (BENCH_WEBHOOK_CPU_BASELINE_REF), each run in a
 *      child process of its tree, BENCH_WEBHOOK_CPU_REPEATS times each: CPU per delivery of the
 *      worker and of its backends. Targets: <= 0.6 ms together, end-to-end p95 <= 100 ms (and the
 *      backlog part's one subscription >= 1,500/s).
 *   6. Statements (`WebhookStatements.ts`, by name only): one end-to-end run with pg_stat_statements
 *      (preloaded through BENCH_PG_SETTINGS), where a delivery's PostgreSQL time goes.
 *
 * A run of some parts only keeps the other parts' figures of the results file it replaces, each
 * marked with the date it was measured (`carriedOver`).
 *
 * Nothing in src/ is changed or wrapped: the consumer is `WebhookFanOut.layer`, the worker
 * `JobWorker.layer` with `WebhookDrainer.make` (one drainer per subscription); the phases come
 * from their own spans. BENCH_WEBHOOK_SKIP_HELD=false makes the round create a job per subscription
 * and round even when a live drainer holds the slot (to price that skip).
 */
import { randomBytes } from "node:crypto"
import { existsSync, readFileSync } from "node:fs"
import { resolve } from "node:path"
import { Config, Console, Duration, Effect, Redacted } from "effect"
import { SqlClient } from "effect/sql"
import * as SecretBox from "../../src/crypto/SecretBox.ts"
import * as BothyConfig from "../../src/platform/BothyConfig.ts"
import type { WebhookSettings } from "../../src/webhooks/WebhookConfig.ts"
import type { Benchmark } from "../harness/Benchmark.ts"
import { BenchServer } from "../harness/BenchServer.ts"
import type { Report, Target } from "../harness/Report.ts"
import * as SourceTree from "../harness/SourceTree.ts"
import * as Throughput from "../harness/Throughput.ts"
import * as WebhookBacklog from "./WebhookBacklog.ts"
import * as WebhookCpu from "./WebhookCpu.ts"
import * as WebhookEndToEnd from "./WebhookEndToEnd.ts"
import * as WebhookRounds from "./WebhookRounds.ts"
import * as WebhookStatements from "./WebhookStatements.ts"
import * as WebhookTelemetryCost from "./WebhookTelemetryCost.ts"

const allParts = ["endToEnd", "rounds", "backlog", "telemetry", "cpu", "statements"] as const
/** `statements` needs pg_stat_statements preloaded (`WebhookStatements.preloadSettings`): asked for by name. */
const defaultParts = allParts.filter((p) => p !== "statements")

const settings = Config.all({
  throughput: Throughput.settings,
  parts: Config.String("BENCH_WEBHOOK_PARTS").pipe(Config.withDefault(defaultParts.join(","))),
  leafDays: Config.Int("BENCH_WEBHOOK_LEAF_DAYS").pipe(Config.withDefault(44)),
  rate: Config.Number("BENCH_WEBHOOK_RATE").pipe(Config.withDefault(500)),
  seconds: Config.Number("BENCH_WEBHOOK_SECONDS").pipe(Config.withDefault(20)),
  subscriptions: Config.Int("BENCH_WEBHOOK_SUBSCRIPTIONS").pipe(Config.withDefault(10)),
  concurrency: Config.Int("BENCH_WEBHOOK_CONCURRENCY").pipe(Config.withDefault(20)),
  skipHeld: Config.Boolean("BENCH_WEBHOOK_SKIP_HELD").pipe(Config.withDefault(true)),
  // Appends serialize on the counter row; with the deliveries now using the CPU too, 4 connections
  // no longer carried 500 appends/s, so the open-loop producer could not offer the asked rate.
  producerConnections: Config.Int("BENCH_WEBHOOK_PRODUCER_POOL").pipe(Config.withDefault(8)),
  producerThread: Config.Boolean("BENCH_WEBHOOK_PRODUCER_THREAD").pipe(Config.withDefault(true)),
  // The first seconds of a fresh process run cold (JIT, first plans, first connections): produced at
  // the same rate but left out of the figures, as a worker pays them once when it starts.
  warmupSeconds: Config.Number("BENCH_WEBHOOK_WARMUP_SECONDS").pipe(Config.withDefault(5)),
  // One end-to-end run before the repeats, not counted: the first run of a fresh process has a cold
  // JIT, which a 5 s warm-up did not cover (it began its window 1,052 deliveries behind).
  processWarmupSeconds: Config.Number("BENCH_WEBHOOK_PROCESS_WARMUP_SECONDS").pipe(Config.withDefault(15)),
  workerConnections: Config.Int("BENCH_WEBHOOK_POOL").pipe(Config.withDefault(20)),
  // The worker's own default (`consumer.cooldown`) unless told otherwise, e.g. "0s" for none.
  cooldown: Config.String("BENCH_WEBHOOK_COOLDOWN").pipe(Config.withDefault(BothyConfig.defaults["consumer.cooldown"])),
  // The same-run baseline: the end-to-end run again with this cooldown ("0s": every wake-up served
  // at once, as before the cooldown existed); "none" skips it.
  baselineCooldown: Config.String("BENCH_WEBHOOK_BASELINE_COOLDOWN").pipe(Config.withDefault("0s")),
  drainSeconds: Config.Number("BENCH_WEBHOOK_DRAIN_SECONDS").pipe(Config.withDefault(300)),
  historyDeliveries: Config.Int("BENCH_WEBHOOK_HISTORY").pipe(Config.withDefault(100_000)),
  diagRates: Config.String("BENCH_WEBHOOK_DIAG_RATES").pipe(Config.withDefault("50,100,200")),
  roundSubscriptions: Config.Int("BENCH_WEBHOOK_ROUND_SUBSCRIPTIONS").pipe(Config.withDefault(10_000)),
  roundSpaces: Config.Int("BENCH_WEBHOOK_ROUND_SPACES").pipe(Config.withDefault(100)),
  backlog: Config.Int("BENCH_WEBHOOK_BACKLOG").pipe(Config.withDefault(20_000)),
  roundRepeats: Config.Int("BENCH_WEBHOOK_ROUND_REPEATS").pipe(Config.withDefault(3)),
  backlogCases: Config.String("BENCH_WEBHOOK_BACKLOG_CASES").pipe(Config.withDefault("1x10000,10x5000")),
  backlogRepeats: Config.Int("BENCH_WEBHOOK_BACKLOG_REPEATS").pipe(Config.withDefault(3)),
  backlogSeconds: Config.Number("BENCH_WEBHOOK_BACKLOG_SECONDS").pipe(Config.withDefault(300)),
  // `bothy worker`'s pool: the `database.pool_size` default.
  backlogConnections: Config.Int("BENCH_WEBHOOK_BACKLOG_POOL").pipe(Config.withDefault(10)),
  // Main before the drainer; "none" skips the baseline.
  backlogBaselineRef: Config.String("BENCH_WEBHOOK_BACKLOG_BASELINE_REF").pipe(Config.withDefault("16e311a")),
  // The code before the drainer drains about 35 deliveries/s for one subscription: 10,000 would take
  // about five minutes a run, so its runs are cut here and measured over what they delivered.
  backlogBaselineSeconds: Config.Number("BENCH_WEBHOOK_BACKLOG_BASELINE_SECONDS").pipe(Config.withDefault(20)),
  // At least 3 of each arm, so a median has company.
  telemetryRepeats: Config.Int("BENCH_WEBHOOK_TELEMETRY_REPEATS").pipe(Config.withDefault(3)),
  scrapeSeconds: Config.Number("BENCH_WEBHOOK_SCRAPE_SECONDS").pipe(Config.withDefault(15)),
})

const batchSize = 500
const backlogAppendSize = 5000
/** The backlog targets: deliveries/s of the case with this many subscriptions, at this size or more. */
const backlogTargets = [
  { name: "backlog one subscription >= 500 deliveries/s", subscriptions: 1, perSubscription: 10_000, target: 500 },
  { name: "backlog ten subscriptions >= 1500 deliveries/s", subscriptions: 10, perSubscription: 5_000, target: 1500 },
  // The cost-of-an-event issue's: cuts to a delivery's CPU must keep one subscription's drain this fast.
  { name: "backlog one subscription >= 1500 deliveries/s", subscriptions: 1, perSubscription: 10_000, target: 1500 },
] as const
const pollInterval = Duration.seconds(1)
const flatSlopeShare = 0.01
const p95Target = 100

const round3 = (n: number) => Math.round(n * 1000) / 1000
const fixed = (n: number, digits = 1) => (Number.isFinite(n) ? n.toFixed(digits) : "n/a")
const median = (values: ReadonlyArray<number>) => round3(Throughput.median(values))
const packageVersion = (name: string): string =>
  JSON.parse(readFileSync(resolve(import.meta.dirname, "../../node_modules", name, "package.json"), "utf8")).version

type E2E = WebhookEndToEnd.EndToEndResult

/** The figures of an end-to-end run worth printing as it ends; the file gets everything. */
const summary = (r: E2E) => ({
  delivered: `${r.delivered}/${r.events}`,
  duplicates: r.duplicates,
  outOfOrder: r.outOfOrder,
  achievedEventsPerSecond: r.achievedEventsPerSecond,
  deliveriesPerSecond: r.deliveriesPerSecond,
  latencyMs: r.latencyMs,
  checkpointsWhileProducing: r.checkpointsWhileProducing,
  backlog: {
    flat: r.backlog.flat,
    pendingDeliveries: r.backlog.pendingDeliveries,
    cursorLag: r.backlog.cursorLag,
    atProductionEnd: r.backlog.atProductionEnd,
    drainSeconds: r.backlog.drainSeconds,
  },
  breakdownMsP50P95: Object.fromEntries(
    Object.entries(r.breakdownMs).flatMap(([k, d]) => (typeof d === "string" ? [] : [[k, [d.p50, d.p95]]])),
  ),
  perSubscription: {
    attemptMs: [r.perSubscription.attemptMs.p50, r.perSubscription.attemptMs.p95],
    handoverGapMs: [r.perSubscription.handoverGapMs.p50, r.perSubscription.handoverGapMs.p95],
    cycleMs: [r.perSubscription.cycleMs.p50, r.perSubscription.cycleMs.p95],
  },
  jobs: {
    created: r.jobs.created,
    runsPerDelivery: r.jobs.runsPerDelivery,
    statementsPerDelivery: r.jobs.statementsPerDelivery,
  },
  cpu: r.cpu,
})

const breakdownPhases = [
  "commitToRoundStart",
  "roundDuration",
  "commitToRoundEnd",
  "roundEndToAttempt",
  "attemptToSend",
  "sendToArrival",
  "arrivalToAnswered",
] as const

const millisOf = (name: string, raw: string) =>
  Effect.fromResult(BothyConfig.parseDurationOrZero(raw)).pipe(
    Effect.map(Duration.toMillis),
    Effect.mapError((why) => new Error(`${name} = ${JSON.stringify(raw)}: ${why}`)),
  )

/** The settings read and checked, the parts to run, and the end-to-end run's configuration. */
const plan = Effect.gen(function* () {
  const config = yield* settings
  const cooldownMs = yield* millisOf("BENCH_WEBHOOK_COOLDOWN", config.cooldown)
  const baselineCooldownMs =
    config.baselineCooldown.trim() === "none"
      ? undefined
      : yield* millisOf("BENCH_WEBHOOK_BASELINE_COOLDOWN", config.baselineCooldown)
  const webhookSettings: WebhookSettings = {
    secretKey: yield* SecretBox.parseKey(Redacted.make(randomBytes(32).toString("base64"))),
    policy: { allowHttpLoopback: true, allowCidrs: [], allowHosts: [] },
  }
  return {
    config,
    parts: new Set(config.parts.split(",").map((p) => p.trim())),
    repeats: config.throughput.repeats,
    warmupSeconds: config.warmupSeconds,
    cooldownMs,
    baselineCooldownMs,
    webhookSettings,
    e2eConfig: {
      eventsPerSecond: config.rate,
      seconds: config.seconds,
      warmupSeconds: config.warmupSeconds,
      subscriptions: config.subscriptions,
      batchSize,
      pollInterval,
      cooldownMs,
      concurrency: config.concurrency,
      skipHeld: config.skipHeld,
      workerConnections: config.workerConnections,
      producerConnections: config.producerConnections,
      producerThread: config.producerThread,
      drainSeconds: config.drainSeconds,
      historyDeliveries: config.historyDeliveries,
      flatSlopeShare,
    },
  }
})
type Plan = Effect.Success<typeof plan>

type Row = ReadonlyArray<string>

/** What a part hands to the report: its sections of the results file, its targets and its rows. */
interface Part {
  readonly results: Record<string, unknown>
  readonly baseline: Record<string, unknown>
  readonly conditions?: unknown
  readonly targets: ReadonlyArray<Target | undefined>
  readonly rows: ReadonlyArray<Row>
}

// ---- 1. end to end ----

/** Every end-to-end run: ours and the baseline cooldown alternating, and the diagnostic rates. */
interface EndToEndRuns {
  readonly e2eRuns: ReadonlyArray<E2E & { readonly repeat: number }>
  readonly baselineRuns: ReadonlyArray<E2E & { readonly repeat: number }>
  readonly diagnostics: ReadonlyArray<E2E & { readonly eventsPerSecond: number }>
}

const runEndToEnd = (p: Plan) =>
  Effect.gen(function* () {
    const { config, e2eConfig, webhookSettings, warmupSeconds, cooldownMs, baselineCooldownMs } = p
    const e2eRuns: Array<E2E & { readonly repeat: number }> = []
    const baselineRuns: Array<E2E & { readonly repeat: number }> = []
    for (let repeat = 1; repeat <= p.repeats; repeat++) {
      // Ours and the baseline alternate which goes first, so drift on the machine hits both alike.
      const order =
        baselineCooldownMs === undefined ? ["ours"] : repeat % 2 === 1 ? ["ours", "baseline"] : ["baseline", "ours"]
      for (const which of order) {
        const ms = which === "ours" ? cooldownMs : baselineCooldownMs!
        yield* Console.log(
          `end to end #${repeat} (${which}, cooldown ${ms} ms): ${config.rate} events/s for ${config.seconds} s (after ${warmupSeconds} s warm-up) over ${config.subscriptions} subscriptions, worker concurrency ${config.concurrency}, pool ${config.workerConnections}`,
        )
        const r = yield* WebhookEndToEnd.measure({ ...e2eConfig, cooldownMs: ms, webhookSettings })
        ;(which === "ours" ? e2eRuns : baselineRuns).push({ repeat, ...r })
        yield* Console.log(`end to end #${repeat} (${which}): ${JSON.stringify(summary(r), null, 2)}`)
      }
    }
    // Diagnostic: the same run at lower rates, once each, to see the path's latency without the
    // queueing a saturated one adds. Never the target figure.
    const diagnostics: Array<E2E & { readonly eventsPerSecond: number }> = []
    for (const rate of config.diagRates
      .split(",")
      .map((r) => Number(r.trim()))
      .filter((r) => r > 0)) {
      yield* Console.log(`end to end diagnostic: ${rate} events/s for ${config.seconds} s`)
      const r = yield* WebhookEndToEnd.measure({ ...e2eConfig, eventsPerSecond: rate, webhookSettings })
      diagnostics.push({ eventsPerSecond: rate, ...r })
      yield* Console.log(`end to end diagnostic at ${rate} events/s: ${JSON.stringify(summary(r), null, 2)}`)
    }
    return { e2eRuns, baselineRuns, diagnostics } satisfies EndToEndRuns
  })

/** Medians of ours and of the baseline cooldown. */
const endToEndFigures = (p: Plan, runs: EndToEndRuns) => {
  const { config } = p
  const e2eMedian = (f: (r: E2E) => number) => median(runs.e2eRuns.map(f))
  const baseMedian = (f: (r: E2E) => number) => median(runs.baselineRuns.map(f))
  const baseline =
    runs.baselineRuns.length === 0
      ? undefined
      : {
          cooldownMs: p.baselineCooldownMs,
          median: {
            achievedEventsPerSecond: baseMedian((r) => r.achievedEventsPerSecond),
            deliveriesPerSecond: baseMedian((r) => r.deliveriesPerSecond),
            latencyMs: {
              p50: baseMedian((r) => r.latencyMs.p50),
              p95: baseMedian((r) => r.latencyMs.p95),
              p99: baseMedian((r) => r.latencyMs.p99),
            },
            msPerEvent: baseMedian((r) => r.cpu.msPerEvent),
            machineBusy: baseMedian((r) => r.cpu.machineBusy),
            statementsPerDelivery: baseMedian((r) => r.jobs.statementsPerDelivery),
          },
          flatRuns: runs.baselineRuns.filter((r) => r.backlog.flat).length,
          rateHeldRuns: runs.baselineRuns.filter((r) => r.achievedEventsPerSecond >= 0.95 * config.rate).length,
          runs: runs.baselineRuns,
        }
  const endToEnd =
    runs.e2eRuns.length === 0
      ? undefined
      : {
          median: {
            deliveriesPerSecond: e2eMedian((r) => r.deliveriesPerSecond),
            achievedEventsPerSecond: e2eMedian((r) => r.achievedEventsPerSecond),
            latencyMs: {
              p50: e2eMedian((r) => r.latencyMs.p50),
              p95: e2eMedian((r) => r.latencyMs.p95),
              p99: e2eMedian((r) => r.latencyMs.p99),
              max: e2eMedian((r) => r.latencyMs.max),
            },
            pendingSlopePerSecond: e2eMedian((r) => r.backlog.pendingDeliveries.slopePerSecond),
            cursorLagSlopePerSecond: e2eMedian((r) => r.backlog.cursorLag.slopePerSecond),
            pendingAtProductionEnd: e2eMedian((r) => r.backlog.atProductionEnd.pendingDeliveries),
            drainSeconds: e2eMedian((r) => r.backlog.drainSeconds),
            drainDeliveriesPerSecond: e2eMedian((r) => r.backlog.drainDeliveriesPerSecond),
            breakdownMs: Object.fromEntries(
              breakdownPhases.map((k) => [
                k,
                { p50: e2eMedian((r) => r.breakdownMs[k].p50), p95: e2eMedian((r) => r.breakdownMs[k].p95) },
              ]),
            ),
            cpu: {
              clientCores: e2eMedian((r) => r.cpu.clientCores),
              serverCores: e2eMedian((r) => r.cpu.serverCores),
              machineBusy: e2eMedian((r) => r.cpu.machineBusy),
              msPerEvent: e2eMedian((r) => r.cpu.msPerEvent),
            },
            runsPerDelivery: e2eMedian((r) => r.jobs.runsPerDelivery),
            statementsPerDelivery: e2eMedian((r) => r.jobs.statementsPerDelivery),
            cycleMs: {
              p50: e2eMedian((r) => r.perSubscription.cycleMs.p50),
              p95: e2eMedian((r) => r.perSubscription.cycleMs.p95),
            },
          },
          flatRuns: runs.e2eRuns.filter((r) => r.backlog.flat).length,
          /** Runs whose producer committed at least 95% of the asked rate: the load was the one asked for. */
          rateHeldRuns: runs.e2eRuns.filter((r) => r.achievedEventsPerSecond >= 0.95 * config.rate).length,
          drainedRuns: runs.e2eRuns.filter((r) => r.backlog.drained).length,
          runs: runs.e2eRuns,
        }

  return { baseline, endToEnd }
}
type EndToEndFigures = ReturnType<typeof endToEndFigures>

/** The baseline and value/baseline columns of a row. */
const vsBaseline = (value: number, base: number | undefined, digits = 1) =>
  base === undefined ? ["", ""] : [fixed(base, digits), `${fixed(value / base, 2)}x`]

/** Throughput, latency, backlog and CPU of the end-to-end medians. */
const e2eRows = (p: Plan, runs: EndToEndRuns, f: EndToEndFigures): Array<Row> => {
  const { config } = p
  const { e2eRuns, baselineRuns } = runs
  const { endToEnd, baseline } = f
  const m = endToEnd?.median
  const b = baseline?.median
  if (m === undefined || endToEnd === undefined) return []
  return [
    [
      "end to end",
      `${config.rate} events/s, ${config.subscriptions} subs`,
      "deliveries/s",
      fixed(m.deliveriesPerSecond),
      "",
      "",
      "",
    ],
    [
      "end to end",
      "producer commits",
      "events/s",
      fixed(m.achievedEventsPerSecond),
      ...vsBaseline(m.achievedEventsPerSecond, b?.achievedEventsPerSecond),
      `${endToEnd.rateHeldRuns}/${e2eRuns.length} runs >= 95% of asked${baseline === undefined ? "" : ` (baseline ${baseline.rateHeldRuns}/${baselineRuns.length})`}`,
    ],
    ...(["p50", "p95", "p99", "max"] as const).map((q) => [
      "end to end latency",
      `${q}, commit to request`,
      "ms",
      fixed(m.latencyMs[q]),
      ...(q === "max" ? ["", ""] : vsBaseline(m.latencyMs[q], b?.latencyMs[q])),
      q === "p95" ? `<= ${p95Target}` : "",
    ]),
    [
      "backlog",
      "pending deliveries slope",
      "per s",
      fixed(m.pendingSlopePerSecond, 2),
      "",
      "",
      `<= ${flatSlopeShare * config.rate}`,
    ],
    [
      "backlog",
      "cursor lag slope",
      "per s",
      fixed(m.cursorLagSlopePerSecond, 2),
      "",
      "",
      `<= ${flatSlopeShare * config.rate}`,
    ],
    ["backlog", "flat runs", "runs", `${endToEnd.flatRuns}/${e2eRuns.length}`, "", "", ""],
    [
      "cpu",
      "while producing: this process / server / machine",
      "cores / cores / %",
      `${fixed(m.cpu.clientCores, 2)} / ${fixed(m.cpu.serverCores, 2)} / ${fixed(m.cpu.machineBusy * 100, 0)}`,
      "",
      "",
      "",
    ],
    [
      "cpu",
      "process + server per event",
      "ms",
      fixed(m.cpu.msPerEvent, 2),
      ...vsBaseline(m.cpu.msPerEvent, b?.msPerEvent, 2),
      "",
    ],
  ]
}

/** The drain jobs' statements, the backlog's drain, and where the end-to-end time goes. */
const e2eWorkRows = (p: Plan, runs: EndToEndRuns, f: EndToEndFigures): Array<Row> => {
  const { config } = p
  const { e2eRuns } = runs
  const { endToEnd } = f
  const m = endToEnd?.median
  const b = f.baseline?.median
  if (m === undefined || endToEnd === undefined) return []
  return [
    ["drain jobs", "runs per delivery", "runs", fixed(m.runsPerDelivery, 3), "", "", ""],
    [
      "drain jobs",
      "statements per delivery (all drain runs)",
      "statements",
      fixed(m.statementsPerDelivery, 2),
      ...vsBaseline(m.statementsPerDelivery, b?.statementsPerDelivery, 2),
      "",
    ],
    ["backlog", "pending at production end", "deliveries", fixed(m.pendingAtProductionEnd, 0), "", "", ""],
    ["backlog", "deliveries/s while draining", "deliveries/s", fixed(m.drainDeliveriesPerSecond), "", "", ""],
    [
      "backlog",
      "drain after production",
      "s",
      fixed(m.drainSeconds, 2),
      "",
      "",
      `${endToEnd.drainedRuns}/${e2eRuns.length} drained`,
    ],
    ...(["commitToRoundEnd", "roundEndToAttempt", "attemptToSend", "sendToArrival", "arrivalToAnswered"] as const).map(
      (k) => [
        "breakdown",
        k,
        "ms p50 / p95",
        `${fixed(m.breakdownMs[k]!.p50)} / ${fixed(m.breakdownMs[k]!.p95)}`,
        "",
        "",
        "",
      ],
    ),
    [
      "per subscription",
      "cycle (one delivery to the next)",
      "ms p50 / p95",
      `${fixed(m.cycleMs.p50)} / ${fixed(m.cycleMs.p95)}`,
      "",
      "",
      `${fixed(1000 / (config.rate / config.subscriptions))} offered`,
    ],
  ]
}

const diagRows = (p: Plan, diagnostics: EndToEndRuns["diagnostics"]): Array<Row> => {
  const { config } = p
  return diagnostics.flatMap((d) => [
    [
      "diag: end to end",
      `${d.eventsPerSecond} events/s, ${config.subscriptions} subs`,
      "deliveries/s",
      fixed(d.deliveriesPerSecond),
      "",
      "",
      d.backlog.flat ? "flat" : "NOT flat",
    ],
    [
      "diag: end to end latency",
      `${d.eventsPerSecond} events/s`,
      "ms p50 / p95 / p99",
      `${fixed(d.latencyMs.p50)} / ${fixed(d.latencyMs.p95)} / ${fixed(d.latencyMs.p99)}`,
      "",
      "",
      "",
    ],
    ...(["commitToRoundEnd", "roundEndToAttempt", "attemptToSend", "sendToArrival"] as const).map((k) => [
      "diag: breakdown",
      `${d.eventsPerSecond} events/s, ${k}`,
      "ms p50 / p95",
      `${fixed(d.breakdownMs[k].p50)} / ${fixed(d.breakdownMs[k].p95)}`,
      "",
      "",
      "",
    ]),
  ])
}

const e2eTargets = (p: Plan, runs: EndToEndRuns, f: EndToEndFigures) => {
  const { config } = p
  const { e2eRuns } = runs
  const { endToEnd } = f
  const m = endToEnd?.median
  const latencyTarget: Target | undefined =
    m === undefined
      ? undefined
      : {
          name: `end-to-end p95 <= ${p95Target} ms`,
          value: m.latencyMs.p95,
          target: p95Target,
          met: m.latencyMs.p95 <= p95Target && endToEnd?.drainedRuns === e2eRuns.length,
        }
  // The latency figure stands for the asked rate only if the producer actually offered it.
  const rateTarget: Target | undefined =
    endToEnd === undefined
      ? undefined
      : {
          name: `producer held >= 95% of ${config.rate} events/s (runs)`,
          value: endToEnd.rateHeldRuns,
          target: e2eRuns.length,
          met: endToEnd.rateHeldRuns === e2eRuns.length,
        }

  return [latencyTarget, rateTarget]
}

/** `baseline.endToEnd` of the results file, whether the part ran or not. */
const e2eBaseline = (f: EndToEndFigures | undefined) =>
  f?.baseline === undefined
    ? "no baseline run (BENCH_WEBHOOK_BASELINE_COOLDOWN=none); the target is absolute (p95 <= 100 ms, from the issue)"
    : {
        note: `the same end-to-end run in the same repeats with the webhooks consumer's cooldown at ${f.baseline.cooldownMs} ms (0: every wake-up served at once, the worker's behaviour before consumer.cooldown); ours and the baseline alternate which runs first`,
        ...f.baseline,
      }

const endToEndPart = (p: Plan) =>
  Effect.gen(function* () {
    const runs = yield* runEndToEnd(p)
    const f = endToEndFigures(p, runs)
    return {
      results: {
        endToEnd: f.endToEnd,
        endToEndDiagnostic:
          runs.diagnostics.length === 0
            ? undefined
            : {
                note: "diagnostic, not the target figure: the same end-to-end run at lower offered rates, once each, to see where the time goes when the path is not saturated",
                runs: runs.diagnostics,
              },
      },
      baseline: { endToEnd: e2eBaseline(f) },
      targets: e2eTargets(p, runs, f),
      rows: [...e2eRows(p, runs, f), ...e2eWorkRows(p, runs, f), ...diagRows(p, runs.diagnostics)],
    } satisfies Part
  })

// ---- 2. the round alone ----

/** Subscriptions and backlog set up once, the plan probes, then every case's drains. */
const runRounds = (p: Plan) =>
  Effect.gen(function* () {
    const { config, webhookSettings } = p
    yield* Console.log(
      `rounds: creating ${config.roundSubscriptions} subscriptions over ${config.roundSpaces} spaces, then a backlog of ${config.backlog} events`,
    )
    const setup = yield* WebhookRounds.prepare({
      subscriptions: config.roundSubscriptions,
      spaces: config.roundSpaces,
      backlog: config.backlog,
      batchSize,
      createConcurrency: 4,
      webhookSettings,
    })
    yield* Console.log(
      `rounds: ${config.roundSubscriptions} subscriptions created in ${setup.createSeconds} s; backlog seqs ${setup.before + 1n}..${setup.head}`,
    )
    // The plan, with the match case's subscriptions installed and analyzed, before any drain.
    yield* setup.install("match")
    const explain = yield* setup.explain(batchSize)
    const explainOne = yield* setup.explain(1)
    const whatIf = {
      batch: yield* setup.explainPlainJoin(batchSize),
      singleEvent: yield* setup.explainPlainJoin(1),
    }
    yield* Console.log(
      `what-if plain join: batch ${whatIf.batch.usesIndex ? "uses" : "does NOT use"} the index (seq scans: ${whatIf.batch.seqScansOfSubscriptionTables.join(", ") || "none"}; ${fixed(whatIf.batch.executionMs, 2)} ms against ${fixed(explain.executionMs, 2)} ms as bothy runs it), single event ${whatIf.singleEvent.usesIndex ? "uses" : "does NOT use"} it`,
    )
    yield* Console.log(
      `matching plan, batch of ${explain.batchEvents}: uses ${explain.usesSpacesIndex ? "" : "NOT "}webhook_subscription_spaces_pkey; seq scans: ${explain.seqScansOfSubscriptionTables.join(", ") || "none"}\n  ${explain.nodeTypes.join("\n  ")}`,
    )
    yield* Console.log(
      `matching plan, batch of 1: uses ${explainOne.usesSpacesIndex ? "" : "NOT "}webhook_subscription_spaces_pkey; seq scans: ${explainOne.seqScansOfSubscriptionTables.join(", ") || "none"}`,
    )

    const runs = Object.fromEntries(WebhookRounds.cases.map((c) => [c, [] as Array<WebhookRounds.DrainRun>])) as Record<
      WebhookRounds.Case,
      Array<WebhookRounds.DrainRun>
    >
    for (let repeat = 0; repeat < Math.max(1, config.roundRepeats); repeat++) {
      for (let k = 0; k < WebhookRounds.cases.length; k++) {
        const c = WebhookRounds.cases[(k + repeat) % WebhookRounds.cases.length]!
        const r = yield* setup.drain(c, repeat + 1)
        runs[c].push(r)
        yield* Console.log(
          `rounds: ${c} #${repeat + 1}: ${r.eventsPerSecond} events/s, ${r.deliveriesPerSecond} deliveries/s, ${r.jobsPerSecond} jobs/s in ${r.seconds} s (client ${r.clientCores} cores, machine ${Math.round(r.machineBusy * 100)}% busy)`,
        )
      }
    }
    yield* setup.cleanup
    return { setup, explain, explainOne, whatIf, runs }
  })
type RoundsRuns = Effect.Success<ReturnType<typeof runRounds>>

const roundsFigures = (p: Plan, { setup, explain, explainOne, whatIf, runs }: RoundsRuns) => {
  const { config } = p
  const med = (c: WebhookRounds.Case, f: (r: WebhookRounds.DrainRun) => number) => median(runs[c].map(f))
  const caseFigures = (c: WebhookRounds.Case) => ({
    eventsPerSecond: med(c, (r) => r.eventsPerSecond),
    deliveriesPerSecond: med(c, (r) => r.deliveriesPerSecond),
    jobsPerSecond: med(c, (r) => r.jobsPerSecond),
    rowsPerSecond: med(c, (r) => r.rowsPerSecond),
    clientCores: med(c, (r) => r.clientCores),
    phasesMsPerRound: Object.fromEntries(
      RoundTraceKeys(runs[c]).map((p) => [p, med(c, (r) => r.phasesMsPerRound[p] ?? Number.NaN)]),
    ),
    runs: runs[c],
  })
  const match = caseFigures("match")
  const statement = caseFigures("statement")
  const none = caseFigures("none")
  const miss = caseFigures("miss")
  const rounds = {
    subscriptions: config.roundSubscriptions,
    spaces: config.roundSpaces,
    matchingPerEvent: setup.perEvent,
    matchingShare: setup.perEvent / config.roundSubscriptions,
    backlogEvents: config.backlog,
    createSubscriptionsSeconds: setup.createSeconds,
    cases: { match, statement, none, miss },
    ratio: {
      matchOverNone: round3(match.eventsPerSecond / none.eventsPerSecond),
      statementOverNone: round3(statement.eventsPerSecond / none.eventsPerSecond),
      missOverNone: round3(miss.eventsPerSecond / none.eventsPerSecond),
    },
    explain: {
      statement:
        "EXPLAIN (ANALYZE, FORMAT JSON) of WebhookFanOut.fanOut's `ev` (unnest of typed arrays) and `matched` (a LATERAL lookup per event with OFFSET 0) CTEs (the fragment WebhookFanOut.matched that the fan-out itself runs), `matched` as the query, with the first events of the backlog as the parameters, the match case's subscriptions installed and analyzed",
      batch: explain,
      singleEvent: explainOne,
      whatIfPlainJoin: {
        note: "diagnostic, not bothy's statement: the same typed arrays joined to webhook_subscription_spaces with a plain JOIN instead of the LATERAL lookup, to show what the planner picks on its own; plans without their trees",
        ...whatIf,
      },
    },
  }
  return { match, statement, none, miss, rounds }
}

const roundRows = (p: Plan, { setup, explain }: RoundsRuns, f: ReturnType<typeof roundsFigures>): Array<Row> => {
  const { config } = p
  const { match, statement, none, miss } = f
  return [
    [
      "round, 1% matching, transactional",
      `${config.roundSubscriptions} subs, batch ${batchSize}, the fallback round`,
      "events/s",
      String(match.eventsPerSecond),
      String(none.eventsPerSecond),
      `${fixed(match.eventsPerSecond / none.eventsPerSecond, 3)}x`,
      "",
    ],
    [
      "round, 1% matching, one statement",
      `${config.roundSubscriptions} subs, batch ${batchSize}, the worker's round`,
      "events/s",
      String(statement.eventsPerSecond),
      String(none.eventsPerSecond),
      `${fixed(statement.eventsPerSecond / none.eventsPerSecond, 3)}x`,
      "",
    ],
    [
      "round, 1% matching",
      `${setup.perEvent} deliveries/event`,
      "deliveries/s, jobs/s",
      `${match.deliveriesPerSecond}, ${match.jobsPerSecond}`,
      "",
      "",
      "",
    ],
    [
      "round phases, 1% matching",
      "fan-out statement / jobs validate / jobs insert + cursor",
      "ms per round",
      `${fixed(match.phasesMsPerRound.fanOut ?? Number.NaN)} / ${fixed(match.phasesMsPerRound.jobsValidate ?? Number.NaN)} / ${fixed(match.phasesMsPerRound.insertAndCursor ?? Number.NaN)}`,
      "",
      "",
      "",
    ],
    [
      "diag: round, none matching",
      `${config.roundSubscriptions} subs, batch ${batchSize}`,
      "events/s",
      String(miss.eventsPerSecond),
      String(none.eventsPerSecond),
      `${fixed(miss.eventsPerSecond / none.eventsPerSecond, 3)}x`,
      "",
    ],
    [
      "matching plan",
      `batch of ${explain.batchEvents}`,
      "index on spaces",
      explain.usesSpacesIndex ? "yes" : "no",
      "",
      "",
      "index, no seq scan",
    ],
    [
      "matching plan",
      `batch of ${explain.batchEvents}`,
      "seq scans",
      explain.seqScansOfSubscriptionTables.join("; ") || "none",
      "",
      "",
      "",
    ],
  ]
}

const roundsPart = (p: Plan) =>
  Effect.gen(function* () {
    const runs = yield* runRounds(p)
    const f = roundsFigures(p, runs)
    return {
      results: { rounds: f.rounds },
      baseline: {},
      targets: [
        {
          name: "matching uses an index",
          value: runs.explain.usesIndex,
          target: true,
          met: runs.explain.usesIndex,
        },
      ],
      rows: roundRows(p, runs, f),
    } satisfies Part
  })

// ---- 3. the backlog ----

/** A database per tree, then every case on ours and the baseline, alternating which goes first. */
const runBacklog = (p: Plan) =>
  Effect.gen(function* () {
    const { config } = p
    const server = yield* BenchServer
    const sql = yield* SqlClient.SqlClient
    const cases = yield* WebhookBacklog.parseCases("BENCH_WEBHOOK_BACKLOG_CASES", config.backlogCases)
    const baselineRef = config.backlogBaselineRef.trim()
    const baselineTree =
      baselineRef === "none" ? undefined : yield* SourceTree.checkout(baselineRef, "BENCH_WEBHOOK_BACKLOG_BASELINE_REF")
    const trees = [
      { label: "ours", root: SourceTree.here, database: "bench_backlog_ours", boundSeconds: config.backlogSeconds },
      ...(baselineTree === undefined
        ? []
        : [
            {
              label: "baseline",
              root: baselineTree.root,
              database: "bench_backlog_baseline",
              boundSeconds: config.backlogBaselineSeconds,
            },
          ]),
    ]
    // A database per tree, each migrated by the tree's own migrations in its first run.
    for (const t of trees) {
      yield* sql.unsafe(`DROP DATABASE IF EXISTS ${t.database}`)
      yield* sql.unsafe(`CREATE DATABASE ${t.database}`)
    }
    const runs = new Map<string, Array<WebhookBacklog.BacklogRun>>()
    const key = (label: string, c: WebhookBacklog.BacklogCase) => `${label} ${WebhookBacklog.caseName(c)}`
    for (let repeat = 1; repeat <= Math.max(1, config.backlogRepeats); repeat++) {
      for (const c of cases) {
        // Ours and the baseline alternate which goes first, so drift on the machine hits both alike.
        for (const t of repeat % 2 === 1 ? trees : [...trees].reverse()) {
          yield* Console.log(
            `backlog #${repeat} ${WebhookBacklog.caseName(c)} (${t.label}): ${c.subscriptions} subscriptions x ${c.perSubscription} pending, bound ${t.boundSeconds} s`,
          )
          const r = yield* WebhookBacklog.run({
            ...c,
            label: t.label,
            root: t.root,
            server: {
              host: server.host,
              port: server.port,
              user: server.user,
              password: Redacted.value(server.password),
              database: t.database,
              dataDir: server.dataDir,
            },
            connections: config.backlogConnections,
            batchSize,
            appendSize: backlogAppendSize,
            boundSeconds: t.boundSeconds,
          })
          runs.set(key(t.label, c), [...(runs.get(key(t.label, c)) ?? []), r])
        }
      }
    }
    return { cases, baselineRef, baselineTree, runs, key }
  })
type BacklogRuns = Effect.Success<ReturnType<typeof runBacklog>>

const backlogFigures = (p: Plan, { runs, key }: BacklogRuns) => {
  const { config } = p
  /** Deliveries/s over the first `seconds` (requests that arrived), for a run at least that long. */
  const overFirst = (r: WebhookBacklog.BacklogRun, seconds: number) => {
    const whole = Math.floor(seconds)
    return whole < 1 || r.arrivalsPerSecond.length < whole
      ? Number.NaN
      : round3(r.arrivalsPerSecond.slice(0, whole).reduce((a, b) => a + b, 0) / whole)
  }
  const figuresOf = (label: string, c: WebhookBacklog.BacklogCase) => {
    const list = runs.get(key(label, c)) ?? []
    return list.length === 0
      ? undefined
      : {
          case: WebhookBacklog.caseName(c),
          ...c,
          deliveries: c.subscriptions * c.perSubscription,
          median: {
            deliveriesPerSecond: median(list.map((r) => r.deliveriesPerSecond)),
            seconds: median(list.map((r) => r.seconds)),
            overFirstBaselineSeconds: median(
              list.map((r) => overFirst(r, config.backlogBaselineSeconds)).filter(Number.isFinite),
            ),
            statementsPerDelivery: median(list.map((r) => r.drain.statementsPerDelivery)),
            clientCores: median(list.map((r) => r.cpu.clientCores)),
            // Runs from before the receiver had a thread of its own have no figure of it.
            workerCores: median(list.map((r) => r.cpu.clientCores - (r.receiverCores ?? Number.NaN))),
            serverCores: median(list.map((r) => r.cpu.serverCores)),
            machineBusy: median(list.map((r) => r.cpu.machineBusy)),
          },
          drainedRuns: list.filter((r) => r.drained).length,
          runs: list,
        }
  }
  return figuresOf
}
type BacklogFigures = ReturnType<ReturnType<typeof backlogFigures>>

const backlogBaselineOf = (
  p: Plan,
  { baselineRef, baselineTree }: BacklogRuns,
  base: ReadonlyArray<BacklogFigures>,
) => {
  const { config } = p
  return baselineTree === undefined
    ? "no baseline run (BENCH_WEBHOOK_BACKLOG_BASELINE_REF=none); the targets are absolute (from the issue)"
    : {
        note: `the same cases, set up the same way, on the code before the drainer (${baselineRef} = ${baselineTree.commit}) with its own schema, in the same repeats; its drain is cut at ${config.backlogBaselineSeconds} s and measured as deliveries recorded delivered by then per second (it drains about 35/s for one subscription, so a full drain of 10,000 would take about five minutes)`,
        ref: baselineRef,
        commit: baselineTree.commit,
        boundSeconds: config.backlogBaselineSeconds,
        cases: base,
      }
}

const backlogConditionsOf = (p: Plan, { cases, baselineRef, baselineTree, runs, key }: BacklogRuns) => {
  const { config } = p
  /** The worker concurrency a tree's runs used: its `bothy worker`'s. */
  const concurrencyOf = (label: string) => runs.get(key(label, cases[0]!))?.[0]?.concurrency
  return {
    cases: cases.map(WebhookBacklog.caseName),
    repeats: Math.max(1, config.backlogRepeats),
    ours: {
      tree: SourceTree.describeHere(),
      boundSeconds: config.backlogSeconds,
      concurrency: concurrencyOf("ours"),
    },
    baseline:
      baselineTree === undefined
        ? "none"
        : {
            ref: baselineRef,
            commit: baselineTree.commit,
            boundSeconds: config.backlogBaselineSeconds,
            concurrency: concurrencyOf("baseline"),
            tree: "git archive of the commit's src/, migrations/ and package.json in a temporary folder, node_modules linked to this checkout's (the same package versions), removed after the part",
          },
    setup: `per run: a clean slate (TRUNCATE webhook_subscriptions CASCADE and jobs; cursor at the head); S subscriptions through WebhookSubscriptions.create, subscription k covering the one space bench-k with its own receiver path /s{k}, the owner granted webhook_out.deliver on every space; S x n events in appends of ${backlogAppendSize} (event i in space bench-(i mod S), about 100 bytes of payload carrying i); the webhooks round (Consumer.makeRound with WebhookFanOut.roundOptions, batch ${batchSize}) back to back until caught up, so the S x n deliveries are pending and the rounds' drain jobs exist before the clock starts (a job per subscription and round: no drainer ran yet); checked: exactly n pending per subscription; VACUUM ANALYZE; CHECKPOINT`,
    drain: `the clock starts as JobWorker.layer is built with the drain job as bothy worker makes it (WebhookDrainer.make) on queue webhooks at bothy worker's concurrency (src/bin/Worker.ts of the tree), over a pool of ${config.backlogConnections} connections (bothy worker's database.pool_size default) plus NotificationStream's LISTEN connection; no consumer runs meanwhile, so no round sends a NOTIFY; the clock stops once every request has arrived and every delivery is recorded delivered (a count every 5 ms after the last request), or at the bound`,
    figure:
      "deliveries recorded delivered when the clock stopped / seconds on the clock; the table shows the median of the repeats and every repeat",
    overFirstBaselineSeconds: `diagnostic: requests that arrived in the first ${config.backlogBaselineSeconds} s per second (for runs at least that long), the window the baseline is measured over`,
    check:
      "after every run, or its figure is void: each request arrived once, in order per subscription (the envelope's sequence 1, 2, ... carrying the subscription's events in seq order); when drained, every delivery delivered with exactly one attempt, all 2xx; when cut at the bound, no attempt on record without its request",
    receiver: "one node:http server on 127.0.0.1 in the driver's process (keep-alive), 200 as soon as the body is read",
    process:
      "each run in a fresh child process (bench/webhooks/WebhookBacklog.ts) that imports its tree's src/ modules by path: the worker side and the receiver share its event loop; PostgreSQL on the same machine; ours and the baseline alternate which runs first in each repeat",
  }
}

const backlogTargetsOf = (ours: ReadonlyArray<NonNullable<BacklogFigures>>) => {
  const met: Array<Target> = []
  for (const t of backlogTargets) {
    const f = ours.find((o) => o.subscriptions === t.subscriptions)
    if (f === undefined) continue
    met.push({
      name: t.name,
      value: f.median.deliveriesPerSecond,
      target: t.target,
      // Only at the issue's size or more, drained in every repeat.
      met:
        f.median.deliveriesPerSecond >= t.target &&
        f.perSubscription >= t.perSubscription &&
        f.drainedRuns === f.runs.length,
    })
  }
  return met
}

const backlogRows = (
  p: Plan,
  { cases }: BacklogRuns,
  ours: ReadonlyArray<NonNullable<BacklogFigures>>,
  base: ReadonlyArray<BacklogFigures>,
): Array<Row> => {
  const { config } = p
  type Figures = BacklogFigures
  const cores = (f: Figures) =>
    f === undefined
      ? ""
      : `${fixed(f.median.workerCores, 2)} / ${fixed(f.median.serverCores, 2)} / ${fixed(f.median.machineBusy * 100, 0)}`
  const perRepeat = (f: Figures) =>
    f === undefined ? "" : f.runs.map((r) => `${fixed(r.deliveriesPerSecond)}${r.drained ? "" : "*"}`).join(" / ")
  return cases.flatMap((c, i) => {
    const o = ours[i]!
    const b = base[i]
    const target = backlogTargets.find((t) => t.subscriptions === c.subscriptions)
    const label = `${c.subscriptions} subs x ${c.perSubscription} pending${b === undefined ? "" : `, baseline cut at ${config.backlogBaselineSeconds} s`}`
    return [
      [
        "backlog drain",
        label,
        "deliveries/s",
        fixed(o.median.deliveriesPerSecond),
        b === undefined ? "" : fixed(b.median.deliveriesPerSecond),
        b === undefined ? "" : `${fixed(o.median.deliveriesPerSecond / b.median.deliveriesPerSecond, 2)}x`,
        target === undefined ? "" : `>= ${target.target}`,
      ],
      [
        "backlog drain",
        `${WebhookBacklog.caseName(c)}, every repeat (* cut at the bound)`,
        "deliveries/s",
        perRepeat(o),
        perRepeat(b),
        "",
        `${o.drainedRuns}/${o.runs.length} drained`,
      ],
      [
        "backlog drain",
        `${WebhookBacklog.caseName(c)}, statements under Job.run`,
        "per delivery",
        fixed(o.median.statementsPerDelivery, 2),
        b === undefined ? "" : fixed(b.median.statementsPerDelivery, 2),
        "",
        "",
      ],
      [
        "backlog drain",
        `${WebhookBacklog.caseName(c)}, worker (child less its receiver thread) / server / machine`,
        "cores / cores / %",
        cores(o),
        cores(b),
        "",
        "",
      ],
    ]
  })
}

const backlogPart = (p: Plan) =>
  Effect.gen(function* () {
    const runs = yield* runBacklog(p)
    const figuresOf = backlogFigures(p, runs)
    const ours = runs.cases.map((c) => figuresOf("ours", c)!)
    const base = runs.cases.map((c) => figuresOf("baseline", c))
    return {
      results: { backlog: { cases: ours } },
      baseline: { backlog: backlogBaselineOf(p, runs, base) },
      conditions: backlogConditionsOf(p, runs),
      targets: backlogTargetsOf(ours),
      rows: backlogRows(p, runs, ours, base),
    } satisfies Part
  })

// ---- 4. the cost of telemetry ----

const telemetryPart = (p: Plan) =>
  Effect.gen(function* () {
    const telemetry = yield* WebhookTelemetryCost.measure(
      { ...p.e2eConfig, webhookSettings: p.webhookSettings },
      { repeats: p.config.telemetryRepeats, scrapeEveryMs: p.config.scrapeSeconds * 1000 },
    )
    return {
      results: { telemetry: telemetry.results },
      baseline: { telemetry: "the same run with telemetry off: the off arm" },
      conditions: telemetry.conditions,
      targets: telemetry.targets,
      rows: telemetry.table,
    } satisfies Part
  })

// ---- 5. where a delivery's PostgreSQL time goes ----

/** The target of the issue: worker and backends together, per delivery. */
const cpuPerDeliveryTarget = 0.6

const statementsPart = (p: Plan) =>
  Effect.gen(function* () {
    const r = yield* WebhookStatements.measure(
      { ...p.e2eConfig, webhookSettings: p.webhookSettings },
      { leafDays: p.config.leafDays },
    )
    const total = (r.cpu?.processMsPerEvent ?? Number.NaN) + (r.cpu?.serverMsPerEvent ?? Number.NaN)
    const rows: Array<Row> = [
      [
        "CPU per delivery",
        `worker + backends, ${r.leaves} leaves`,
        "ms",
        fixed(total, 3),
        "",
        "",
        `<= ${cpuPerDeliveryTarget}`,
      ],
      ["CPU per delivery", "worker process", "ms", fixed(r.cpu?.processMsPerEvent ?? Number.NaN, 3), "", "", ""],
      ["CPU per delivery", "its backends", "ms", fixed(r.cpu?.serverMsPerEvent ?? Number.NaN, 3), "", "", ""],
      [
        "CPU per event, left out",
        "receiver thread",
        "ms",
        fixed(r.cpu?.receiverMsPerEvent ?? Number.NaN, 3),
        "",
        "",
        "",
      ],
      [
        "CPU per event, left out",
        "producer's backends",
        "ms",
        fixed(r.cpu?.producerBackendMsPerEvent ?? Number.NaN, 3),
        "",
        "",
        "",
      ],
      ["statements per delivery", "worker", "count", fixed(r.worker.statementsPerDelivery, 2), "", "", ""],
      ["planning per delivery", "worker, pg_stat_statements", "ms", fixed(r.worker.planMsPerDelivery, 3), "", "", ""],
      ["execution per delivery", "worker, pg_stat_statements", "ms", fixed(r.worker.execMsPerDelivery, 3), "", "", ""],
      ...r.statements
        .slice(0, 12)
        .map(
          (st): Row => [
            `${st.producer ? "producer: " : st.harness ? "harness: " : ""}${st.statement.slice(0, 60)}`,
            `${fixed(st.callsPerDelivery, 3)} calls, plan ${fixed(st.planMsPerCall, 3)} / exec ${fixed(st.execMsPerCall, 3)} ms a call`,
            "ms per delivery",
            fixed(st.planMsPerDelivery + st.execMsPerDelivery, 4),
            "",
            "",
            "",
          ],
        ),
    ]
    return {
      results: { statements: r },
      baseline: {
        statements:
          "none measured in the same run yet: this part finds where the time goes (the issue's first step); the cuts it leads to are to be priced against this run",
      },
      conditions: {
        leafDays: p.config.leafDays,
        leaves: r.leaves,
        pgSettings: WebhookStatements.preloadSettings,
        run: "the end-to-end run (telemetry off), pg_stat_statements reset at its start; per delivery = over the attempts started in the run (warm-up included)",
      },
      targets: [
        {
          name: "statements: CPU per delivery, worker + backends (ms)",
          value: Math.round(total * 1000) / 1000,
          target: cpuPerDeliveryTarget,
          met: total <= cpuPerDeliveryTarget,
        },
      ],
      rows,
    } satisfies Part
  })

/** The cost of a delivery on this tree and the one before the issue (`WebhookCpu`). */
const cpuPart = (p: Plan): Effect.Effect<Part, unknown, never> =>
  WebhookCpu.measure({
    rate: p.config.rate,
    seconds: p.config.seconds,
    warmupSeconds: p.config.warmupSeconds,
    leafDays: p.config.leafDays,
    historyDeliveries: p.config.historyDeliveries,
    subscriptions: p.config.subscriptions,
  })

// ---- the report ----

const conditions = (p: Plan, backlog: Part | undefined, telemetry: Part | undefined) => {
  const { config, parts, e2eConfig, repeats, warmupSeconds } = p
  return {
    parts: [...parts],
    endToEnd: {
      ...e2eConfig,
      repeats,
      pollInterval: "1 second",
      queue: "webhooks",
      subscriptionsScope:
        "subscription k covers the one space bench-k, no event-type filter, its own receiver path /s{k}; event i is in space bench-(i mod subscriptions): every event matches exactly one subscription, spread evenly (rate/subscriptions each)",
      permissions: "the owner holds webhook_out.deliver on every space (PermissionGrants), so nothing is suppressed",
      producer: `${config.producerThread ? "on a worker thread of its own (ProducerThread.ts: its own event loop and pool, as a host app apart from the worker), " : "in the worker's own event loop, "}one fiber ticking every 1/rate s, forking each append (EventLog.append of one event, autocommitted) at its due time without waiting for the previous one; pool of producerConnections`,
      warmup: `the first ${warmupSeconds} s of each run are produced at the same rate and left out of the figures (a fresh process runs cold: JIT, first plans, first connections)`,
      processWarmup:
        config.processWarmupSeconds > 0
          ? `one end-to-end run of ${config.processWarmupSeconds} s (plus its warm-up) at the asked rate with our settings before the repeats, not counted: the first run of a fresh process had a cold JIT`
          : "none",
      workerSide:
        "one @effect/sql-pg pool (workerConnections) shared by WebhookFanOut.layer (batch 500, poll 1 s, wake-ups served at most once per cooldownMs, the worker's `consumer.cooldown` default unless BENCH_WEBHOOK_COOLDOWN says otherwise; its round is the one-statement round, the transactional one only for a batch with lost events), JobWorker.layer (queue webhooks, concurrency as stated, WebhookDrainer.make: one drainer per subscription, read-ahead 4, linger 100 ms) and the deliveries, plus NotificationStream's own LISTEN connection, as one bothy worker process",
      receiver:
        "one node:http server on 127.0.0.1 in the same process, 200 as soon as the body is read; arrival = performance.now() when the request's headers arrive",
      latency:
        "receiver arrival minus the producer's append returning (performance.timeOrigin + performance.now() across threads), keyed by payload.i; over the events after the warm-up",
      deliveriesPerSecond:
        "requests (first arrivals) received between the due times of the first and last measured events, per second",
      backlogSampling: "every 1 s from the production start: pending deliveries, event_log head - webhooks cursor",
      diagnosticRates: config.diagRates,
      flatCriterion: `least-squares slope over the measured window <= ${flatSlopeShare * 100}% of the offered rate, for pending deliveries and cursor lag`,
      process: `${config.producerThread ? "producer on its own thread; " : "producer, "}consumer, job worker and receiver share one Node process (one event loop for the worker side and the receiver); PostgreSQL on the same 2 cores`,
      history: `before each run, ${config.historyDeliveries} delivered rows of earlier events (with an attempt each) spread over the subscriptions, then VACUUM ANALYZE and CHECKPOINT (the set-up's pages are not left to a checkpoint inside the window; each run records the checkpoints that began while producing): statements are planned against tables of a running installation's size, not the empty ones of a fresh install (whose cached plans scan the table as it grows)`,
    },
    rounds: {
      subscriptions: config.roundSubscriptions,
      spaces: config.roundSpaces,
      scope: "subscription j covers the one space space-(j mod spaces); event i is in space space-(i mod spaces)",
      backlogEvents: config.backlog,
      backlogAppend:
        "EventLog.append, 1,000 events per transaction, after the subscriptions were created; then VACUUM ANALYZE",
      batchSize,
      repeats: config.roundRepeats,
      round:
        "back to back on one connection until CaughtUp. Cases match, none, miss: Consumer.makeRound({ name: 'webhooks', batchSize: 500, fanOut: WebhookFanOut.fanOut, onLoss: WebhookFanOut.onLoss }), the transactional round (split into phases from its spans), which the worker falls back to for a batch with lost events. Case statement: Consumer.makeRound(WebhookFanOut.roundOptions({ batchSize: 500 })), the round the worker runs, the whole round in one statement built from the same matching and delivery CTEs (no phases)",
      betweenRuns:
        "TRUNCATE webhook_subscriptions CASCADE and jobs; subscriptions and their drain rows restored from a copy taken after WebhookSubscriptions.create (no drainer); cursor before the backlog; VACUUM ANALYZE; CHECKPOINT",
      check:
        "after every run: deliveries = backlog x matches per event, none numbered yet (numbers are taken when first sent), each subscription with its drain row, jobs = the rounds' reported jobs (at most one per subscription and round, no drainer runs here), job unique keys distinct, cursor at the head",
      figure: "median over the repeats of backlog / time from the first round's start to the caught-up round's end",
      order: "each repeat runs the cases in a rotating order",
    },
    backlog: backlog?.conditions,
    telemetry: telemetry?.conditions,
    drivers: {
      ours: `@effect/sql-pg ${packageVersion("@effect/sql-pg")}, effect ${packageVersion("effect")}, undici ${packageVersion("undici")}`,
    },
  }
}

const run = Effect.gen(function* () {
  const p = yield* plan
  const { config, parts } = p
  if ((parts.has("endToEnd") || parts.has("telemetry")) && config.processWarmupSeconds > 0) {
    yield* Console.log(
      `end to end: process warm-up run, ${config.processWarmupSeconds} s at ${config.rate} events/s (not counted)`,
    )
    yield* WebhookEndToEnd.measure({
      ...p.e2eConfig,
      seconds: config.processWarmupSeconds,
      webhookSettings: p.webhookSettings,
    })
  }
  const endToEnd = parts.has("endToEnd") ? yield* endToEndPart(p) : undefined
  const rounds = parts.has("rounds") ? yield* roundsPart(p) : undefined
  const backlog = parts.has("backlog") ? yield* backlogPart(p) : undefined
  const telemetry = parts.has("telemetry") ? yield* telemetryPart(p) : undefined
  const cpu = parts.has("cpu") ? yield* cpuPart(p) : undefined
  const statements = parts.has("statements") ? yield* statementsPart(p) : undefined
  const ran = [endToEnd, rounds, backlog, telemetry, cpu, statements].filter((part) => part !== undefined)
  const report = {
    conditions: { ...conditions(p, backlog, telemetry), cpu: cpu?.conditions, statements: statements?.conditions },
    results: Object.assign({}, ...ran.map((part) => part.results)),
    baseline: {
      endToEnd: endToEnd?.baseline.endToEnd ?? e2eBaseline(undefined),
      rounds: {
        none: "the same round (Consumer.makeRound with WebhookFanOut.fanOut) with no subscriptions at all, same backlog, same run: the pure round cost; match/none is what fan-out to 1% of 10,000 subscriptions costs",
        miss: "diagnostic: the 10,000 subscriptions with their spaces renamed so no event matches: finding an event's subscriptions among 10,000 without creating any delivery",
      },
      backlog: backlog?.baseline.backlog,
      telemetry: telemetry?.baseline.telemetry,
      cpu: cpu?.baseline.cpu,
      statements: statements?.baseline.statements,
    },
    targets: ran.flatMap((part) => part.targets).filter((t): t is Target => t !== undefined),
    table: {
      columns: ["measure", "case", "unit", "value", "baseline", "value/baseline", "target"],
      rows: ran.flatMap((part) => part.rows),
    },
  } satisfies Report
  return carryOver(report, parts)
})

/** The sections of the results file each part writes, and the targets it sets (by name). */
const sectionsOf = {
  endToEnd: {
    conditions: ["endToEnd"],
    results: ["endToEnd", "endToEndDiagnostic"],
    baseline: ["endToEnd"],
    target: /^(end-to-end|producer held)/,
  },
  rounds: { conditions: ["rounds"], results: ["rounds"], baseline: ["rounds"], target: /^matching/ },
  backlog: { conditions: ["backlog"], results: ["backlog"], baseline: ["backlog"], target: /^backlog/ },
  telemetry: { conditions: ["telemetry"], results: ["telemetry"], baseline: ["telemetry"], target: /^telemetry/ },
  cpu: { conditions: ["cpu"], results: ["cpu"], baseline: ["cpu"], target: /^cpu:/ },
  statements: { conditions: ["statements"], results: ["statements"], baseline: ["statements"], target: /^statements/ },
} as const satisfies Record<(typeof allParts)[number], unknown>

type Sections = Record<string, unknown>

/**
 * A run of some parts keeps the figures of the others from the file it replaces, marked with the
 * date they were measured, so `BENCH_WEBHOOK_PARTS=telemetry` does not erase the other parts.
 */
const carryOver = (report: Report, parts: ReadonlySet<string>): Report => {
  const missing = allParts.filter((p) => !parts.has(p))
  const file = resolve(import.meta.dirname, "../results/webhooks.json")
  if (missing.length === 0 || !existsSync(file)) return report
  const previous = JSON.parse(readFileSync(file, "utf8")) as {
    readonly date?: string
    readonly conditions?: Sections
    readonly results?: Sections
    readonly baseline?: Sections
    readonly targets?: ReadonlyArray<Target>
  }
  const take = (from: Sections | undefined, into: Sections, keys: ReadonlyArray<string>) => {
    for (const k of keys) if (from?.[k] !== undefined && into[k] === undefined) into[k] = from[k]
  }
  const conditions: Sections = { ...report.conditions }
  const results: Sections = { ...(report.results as Sections) }
  const baseline: Sections = { ...(report.baseline as Sections) }
  const targets = [...report.targets]
  for (const part of missing) {
    const s = sectionsOf[part]
    take(previous.conditions, conditions, s.conditions)
    take(previous.results, results, s.results)
    take(previous.baseline, baseline, s.baseline)
    targets.push(...(previous.targets ?? []).filter((t) => s.target.test(t.name)))
  }
  // A part the earlier file carried over itself keeps the date it was measured.
  const earlier = previous.conditions?.carriedOver as
    | { readonly parts?: ReadonlyArray<string>; readonly measured?: Record<string, string> }
    | undefined
  const carried = missing.filter((p) => sectionsOf[p].results.some((k) => previous.results?.[k] !== undefined))
  conditions.carriedOver = {
    note: "parts not run this time: their conditions, figures and targets are those of the earlier run measured at the date given",
    parts: carried,
    measured: Object.fromEntries(carried.map((p) => [p, earlier?.measured?.[p] ?? previous.date])),
  }
  return { ...report, conditions, results, baseline, targets }
}

const RoundTraceKeys = (runs: ReadonlyArray<WebhookRounds.DrainRun>) => Object.keys(runs[0]?.phasesMsPerRound ?? {})

export default {
  description:
    "webhooks end to end (commit to request, latency, backlog), the webhooks round with 10,000 subscriptions, and a backlog drained (deliveries/s)",
  smoke: {
    BENCH_WEBHOOK_RATE: "50",
    BENCH_WEBHOOK_SECONDS: "2",
    BENCH_WEBHOOK_WARMUP_SECONDS: "1",
    BENCH_WEBHOOK_PROCESS_WARMUP_SECONDS: "1",
    BENCH_WEBHOOK_DRAIN_SECONDS: "60",
    BENCH_WEBHOOK_DIAG_RATES: "20",
    BENCH_WEBHOOK_HISTORY: "200",
    BENCH_WEBHOOK_ROUND_SUBSCRIPTIONS: "100",
    BENCH_WEBHOOK_ROUND_SPACES: "10",
    BENCH_WEBHOOK_BACKLOG: "500",
    BENCH_WEBHOOK_ROUND_REPEATS: "1",
    BENCH_WEBHOOK_BACKLOG_CASES: "1x200,2x100",
    BENCH_WEBHOOK_BACKLOG_REPEATS: "1",
    BENCH_WEBHOOK_BACKLOG_SECONDS: "60",
    BENCH_WEBHOOK_BACKLOG_BASELINE_SECONDS: "2",
    BENCH_WEBHOOK_TELEMETRY_REPEATS: "1",
    BENCH_WEBHOOK_SCRAPE_SECONDS: "1",
    BENCH_WEBHOOK_CPU_REPEATS: "1",
    BENCH_WEBHOOK_LEAF_DAYS: "15",
  },
  run: Effect.gen(function* () {
    const server = yield* BenchServer
    // Scoped here: the runner stops the server when its layer is released, before the scope it
    // hands benchmarks closes, and the pools must end first.
    return yield* run.pipe(Effect.provide(server.pool(1)), Effect.scoped)
  }),
} satisfies Benchmark
