/**
 * `npm run bench -- jobs`: bothy's job runtime, with its defaults and with a prefetch of 500, next
 * to graphile-worker, with its defaults and with its best settings (`GraphileJobRuntime.ts`, a
 * local queue of 500), on the same durable server in the same run:
 *
 *   (a) enqueue: 10,000 no-op jobs in one call of each bulk API, timed from the call to its return
 *       (ours: one `Jobs.insert` of all 10,000, one statement; graphile: one `addJobs`, one
 *       `add_jobs` call).
 *   (b) process: 22,000 pre-inserted no-op jobs at concurrency 10, timed from the worker's start
 *       (the pool it opens included) until every job is recorded finished in the database: the
 *       22,000th run function is entered, then the job table is polled every 10 ms.
 *   (c) latency: one insert per job at a steady 200 jobs/s for 10 s against a running, warmed-up,
 *       idle worker; insert-to-start is from the insert call to the entry of the job's run function
 *       (`performance.now()` both, keyed by the job's arg `i`). Inserts are open-loop: each starts
 *       on schedule, whether or not the previous one has returned.
 *
 * Every run starts from empty job tables (every runtime's, truncated) and a CHECKPOINT, and
 * before (b) the pre-inserted table is VACUUM ANALYZEd and checkpointed again, so no run pays for
 * another's dirty pages or stale statistics. Within each repeat the implementations take turns
 * in a rotating order. Every run checks that each job ran exactly once.
 */
import { readFileSync } from "node:fs"
import { resolve } from "node:path"
import { Console, type Duration, Effect, Schema } from "effect"
import { SqlClient } from "effect/sql"
import type { Benchmark } from "../harness/Benchmark.ts"
import { BenchServer } from "../harness/BenchServer.ts"
import * as CpuUsage from "../harness/CpuUsage.ts"
import type { Report, Table, Target } from "../harness/Report.ts"
import * as Throughput from "../harness/Throughput.ts"
import * as BothyJobRuntime from "./BothyJobRuntime.ts"
import * as GraphileJobRuntime from "./GraphileJobRuntime.ts"
import type { JobRuntime } from "./JobRuntime.ts"
import * as Latency from "./Latency.ts"

const implementations = ["ours", "ours-prefetch", "graphile-defaults", "graphile-best"] as const
type Implementation = (typeof implementations)[number]

const bulkJobs = 10_000
const processJobs = 22_000
const concurrency = 10
/** Ours at its best for many short jobs, as graphile-worker's best holds a local queue of 500. */
const oursPrefetch = 500
const latencyRate = 200
const latencySeconds = 10
const latencyJobs = latencyRate * latencySeconds
const warmupJobs = 10

/** A run broke a promise of the runtime under test (a job ran twice, or never); its figure is void. */
export class RunCheckFailed extends Schema.TaggedError<RunCheckFailed>()("RunCheckFailed", {
  implementation: Schema.String,
  case: Schema.String,
  detail: Schema.String,
}) {
  override get message() {
    return `${this.implementation}, case ${this.case}: ${this.detail}`
  }
}

/**
 * Counts the runs of jobs `0 … n-1` and stamps the first run of each; `all` resolves once every
 * one of them has run. Ids outside the range are ignored.
 */
const trackRuns = (n: number) => {
  const runs = new Uint32Array(n)
  const startedAt = new Float64Array(n)
  let distinct = 0
  let duplicates = 0
  let firstAt = Number.NaN
  let lastAt = Number.NaN
  let resolveAll = () => {}
  const all = new Promise<void>((r) => {
    resolveAll = r
  })
  return {
    startedAt,
    all,
    onRun: (i: number) => {
      const now = performance.now()
      if (!(i >= 0 && i < n)) return
      if (runs[i]!++ > 0) {
        duplicates++
        return
      }
      startedAt[i] = now
      if (distinct++ === 0) firstAt = now
      if (distinct === n) {
        lastAt = now
        resolveAll()
      }
    },
    stats: () => ({ distinct, duplicates, firstAt, lastAt }),
  }
}

type Tracker = ReturnType<typeof trackRuns>

const range = (from: number, n: number) => Array.from({ length: n }, (_, k) => from + k)
const round = (n: number) => Math.round(n)
const round3 = (n: number) => Math.round(n * 1000) / 1000
const mapImplementations = <A>(f: (impl: Implementation) => A) =>
  Object.fromEntries(implementations.map((impl) => [impl, f(impl)])) as Record<Implementation, A>

const packageVersion = (name: string): string =>
  JSON.parse(readFileSync(resolve(import.meta.dirname, "../../node_modules", name, "package.json"), "utf8")).version

interface EnqueueRun {
  readonly repeat: number
  readonly jobsPerSecond: number
  readonly seconds: number
  readonly cpu: CpuUsage.CpuUsed
}

interface ProcessRun {
  readonly repeat: number
  readonly jobsPerSecond: number
  /** Worker start to the last job recorded finished. */
  readonly seconds: number
  /** Worker start to the first run function entered. */
  readonly firstStartMs: number
  /** Worker start to the last job's run function entered. */
  readonly allStartedSeconds: number
  readonly cpu: CpuUsage.CpuUsed
}

interface LatencyRun {
  readonly repeat: number
  readonly insertToStartMs: Latency.Percentiles
  /** How long the insert call took to return (its commit). */
  readonly insertReturnedMs: Latency.Percentiles
  /** How late the pacer started inserts behind schedule. */
  readonly pacerLagMs: Latency.Percentiles
  readonly cpu: CpuUsage.CpuUsed
}

/** What every case of a run shares: the four runtimes on one server, and how to reset between runs. */
interface Bench {
  readonly runtimes: Record<Implementation, JobRuntime>
  readonly postmaster: number | undefined
  readonly checkpoint: Effect.Effect<unknown, unknown>
  /** Every runtime's job tables truncated, then a CHECKPOINT. */
  readonly resetAll: Effect.Effect<unknown, unknown>
}

const setup = Effect.gen(function* () {
  const server = yield* BenchServer
  const sql = yield* SqlClient.SqlClient
  const runtimes: Record<Implementation, JobRuntime> = {
    ours: yield* BothyJobRuntime.make(),
    "ours-prefetch": yield* BothyJobRuntime.make(oursPrefetch),
    "graphile-defaults": yield* GraphileJobRuntime.make("defaults"),
    "graphile-best": yield* GraphileJobRuntime.make("best"),
  }
  const checkpoint = sql.unsafe("CHECKPOINT")
  const resetAll = Effect.andThen(
    Effect.forEach(implementations, (impl) => runtimes[impl].reset, { discard: true }),
    checkpoint,
  )
  return { runtimes, postmaster: CpuUsage.postmasterPid(server.dataDir), checkpoint, resetAll } satisfies Bench
})

const fail = (implementation: Implementation, name: string, detail: string) =>
  new RunCheckFailed({ implementation, case: name, detail })

/** Waits for every tracked job to have run once; a job that ran twice voids the run. */
const awaitRuns = (implementation: Implementation, name: string, runs: Tracker, within: Duration.Input) =>
  Effect.gen(function* () {
    yield* Effect.promise(() => runs.all).pipe(
      Effect.timeoutOrElse({
        duration: within,
        orElse: () =>
          Effect.fail(fail(implementation, name, `only ${runs.stats().distinct} jobs ran within ${within}`)),
      }),
    )
    const { duplicates } = runs.stats()
    if (duplicates > 0) return yield* fail(implementation, name, `${duplicates} runs of jobs that had already run`)
  })

const awaitFinished = (bench: Bench, implementation: Implementation, name: string) =>
  Effect.gen(function* () {
    while ((yield* bench.runtimes[implementation].unfinished) > 0) yield* Effect.sleep("10 millis")
  }).pipe(
    Effect.timeoutOrElse({
      duration: "60 seconds",
      orElse: () => Effect.fail(fail(implementation, name, "jobs still unfinished 60 s after the last one ran")),
    }),
  )

/** (a): one bulk enqueue of `bulkJobs`, timed from the call to its return. */
const enqueueOnce = (bench: Bench) => (implementation: Implementation, repeat: number) =>
  Effect.gen(function* () {
    const runtime = bench.runtimes[implementation]
    yield* bench.resetAll
    const ids = range(0, bulkJobs)
    const cpu0 = CpuUsage.sample(bench.postmaster)
    yield* runtime.enqueueMany(ids)
    const cpu1 = CpuUsage.sample(bench.postmaster)
    const queued = yield* runtime.unfinished
    if (queued !== bulkJobs) return yield* fail(implementation, "enqueue", `${queued} jobs queued, not ${bulkJobs}`)
    const seconds = (cpu1.at - cpu0.at) / 1000
    return {
      repeat,
      jobsPerSecond: bulkJobs / seconds,
      seconds,
      cpu: CpuUsage.since(cpu0, cpu1),
    } satisfies EnqueueRun
  })

/** (b): `processJobs` pre-inserted jobs, from the worker's start until every one is recorded finished. */
const processOnce = (bench: Bench) => (implementation: Implementation, repeat: number) =>
  Effect.gen(function* () {
    const runtime = bench.runtimes[implementation]
    yield* bench.resetAll
    yield* runtime.enqueueMany(range(0, processJobs))
    yield* runtime.analyze
    yield* bench.checkpoint
    const runs = trackRuns(processJobs)
    const cpu0 = CpuUsage.sample(bench.postmaster)
    const cpu1 = yield* Effect.scoped(
      Effect.gen(function* () {
        yield* runtime.start(concurrency, runs.onRun)
        yield* awaitRuns(implementation, "process", runs, "120 seconds")
        yield* awaitFinished(bench, implementation, "process")
        return CpuUsage.sample(bench.postmaster)
      }),
    )
    const { firstAt, lastAt } = runs.stats()
    const seconds = (cpu1.at - cpu0.at) / 1000
    return {
      repeat,
      jobsPerSecond: processJobs / seconds,
      seconds,
      firstStartMs: round3(firstAt - cpu0.at),
      allStartedSeconds: round3((lastAt - cpu0.at) / 1000),
      cpu: CpuUsage.since(cpu0, cpu1),
    } satisfies ProcessRun
  })

/** (c): paced single inserts against a running, warmed-up worker; insert-to-start per job. */
const latencyOnce = (bench: Bench) => (implementation: Implementation, repeat: number) =>
  Effect.gen(function* () {
    const runtime = bench.runtimes[implementation]
    yield* bench.resetAll
    const measured = trackRuns(latencyJobs)
    const warm = trackRuns(warmupJobs)
    const submittedAt = new Float64Array(latencyJobs)
    return yield* Effect.scoped(
      Effect.gen(function* () {
        yield* runtime.start(concurrency, (i) => (i < latencyJobs ? measured.onRun(i) : warm.onRun(i - latencyJobs)))
        // Warm-up: the worker is listening, its connections are open and its statements prepared.
        for (const i of range(latencyJobs, warmupJobs)) yield* runtime.enqueueOne(i)
        yield* awaitRuns(implementation, "latency warm-up", warm, "30 seconds")
        yield* Effect.sleep("1 second")

        const cpu0 = CpuUsage.sample(bench.postmaster)
        const paced = yield* Latency.openLoop(
          latencyJobs,
          latencyRate,
          (k) => {
            submittedAt[k] = performance.now()
          },
          runtime.enqueueOne,
        )
        yield* awaitRuns(implementation, "latency", measured, "60 seconds")
        const cpu1 = CpuUsage.sample(bench.postmaster)
        const latencies = Array.from(submittedAt, (at, k) => measured.startedAt[k]! - at)
        return {
          repeat,
          insertToStartMs: Latency.percentiles(latencies),
          insertReturnedMs: paced.returnedMs,
          pacerLagMs: paced.lagMs,
          cpu: CpuUsage.since(cpu0, cpu1),
        } satisfies LatencyRun
      }),
    )
  })

/** Runs `once` for every implementation `repeats` times, in a rotating order. */
const repeated = <A>(
  repeats: number,
  label: string,
  once: (impl: Implementation, repeat: number) => Effect.Effect<A, unknown>,
  show: (a: A) => string,
) =>
  Effect.gen(function* () {
    const runs = mapImplementations((): Array<A> => [])
    for (let repeat = 0; repeat < repeats; repeat++) {
      for (let i = 0; i < implementations.length; i++) {
        const implementation = implementations[(i + repeat) % implementations.length]!
        const r = yield* once(implementation, repeat + 1)
        runs[implementation].push(r)
        yield* Console.log(`${label}, ${implementation} #${repeat + 1}: ${show(r)}`)
      }
    }
    return runs
  })

const cpuText = (cpu: CpuUsage.CpuUsed) =>
  `client ${cpu.clientCores} cores, server ${cpu.serverCores} cores, machine ${Math.round(cpu.machineBusy * 100)}% busy`

/** Every run of the three cases, by implementation. */
interface Runs {
  readonly enqueue: Record<Implementation, ReadonlyArray<EnqueueRun>>
  readonly processing: Record<Implementation, ReadonlyArray<ProcessRun>>
  readonly latency: Record<Implementation, ReadonlyArray<LatencyRun>>
}

const runCases = (bench: Bench, repeats: number) =>
  Effect.gen(function* () {
    const enqueue = yield* repeated(
      repeats,
      `(a) enqueue ${bulkJobs}`,
      enqueueOnce(bench),
      (r) => `${round(r.jobsPerSecond)} jobs/s (${round3(r.seconds)} s; ${cpuText(r.cpu)})`,
    )
    const processing = yield* repeated(
      repeats,
      `(b) process ${processJobs} at concurrency ${concurrency}`,
      processOnce(bench),
      (r) =>
        `${round(r.jobsPerSecond)} jobs/s (${round3(r.seconds)} s, first start ${round(r.firstStartMs)} ms; ${cpuText(r.cpu)})`,
    )
    const latency = yield* repeated(
      repeats,
      `(c) ${latencyRate} jobs/s for ${latencySeconds} s`,
      latencyOnce(bench),
      (r) =>
        `insert-to-start p50 ${r.insertToStartMs.p50} ms, p95 ${r.insertToStartMs.p95} ms, p99 ${r.insertToStartMs.p99} ms (insert returned p50 ${r.insertReturnedMs.p50} ms; ${cpuText(r.cpu)})`,
    )
    return { enqueue, processing, latency } satisfies Runs
  })

const medianOf = <A>(runs: Record<Implementation, ReadonlyArray<A>>, f: (a: A) => number) =>
  mapImplementations((impl) => Throughput.median(runs[impl].map(f)))

/** The medians the targets, the table and the results read. */
const medians = (runs: Runs) => ({
  enqueueRate: medianOf(runs.enqueue, (r) => r.jobsPerSecond),
  processRate: medianOf(runs.processing, (r) => r.jobsPerSecond),
  p50: medianOf(runs.latency, (r) => r.insertToStartMs.p50),
  p95: medianOf(runs.latency, (r) => r.insertToStartMs.p95),
  p99: medianOf(runs.latency, (r) => r.insertToStartMs.p99),
  processCpu: {
    client: medianOf(runs.processing, (r) => r.cpu.clientCores),
    server: medianOf(runs.processing, (r) => r.cpu.serverCores),
  },
})
type Medians = ReturnType<typeof medians>

const ratios = (m: Record<Implementation, number>) => ({
  oursOverGraphileDefaults: round3(m.ours / m["graphile-defaults"]),
  oursOverGraphileBest: round3(m.ours / m["graphile-best"]),
  oursPrefetchOverGraphileBest: round3(m["ours-prefetch"] / m["graphile-best"]),
})

const targets = ({ processRate, p95 }: Medians): ReadonlyArray<Target> => {
  const processTarget = processRate["ours-prefetch"] / processRate["graphile-best"]
  return [
    {
      name: `(b) ours at its best (prefetch ${oursPrefetch}) >= 1.0x graphile-worker at its best (local queue 500, batched completion), jobs/s processing 22,000 no-op jobs at concurrency 10`,
      value: round3(processTarget),
      target: 1.0,
      met: processTarget >= 1.0,
    },
    {
      name: "(c) our insert-to-start p95 (ms) <= graphile-worker's with its defaults, at 200 jobs/s",
      value: round3(p95.ours),
      target: round3(p95["graphile-defaults"]),
      met: p95.ours <= p95["graphile-defaults"],
    },
  ]
}

const table = (m: Medians): Table => {
  const times = (n: number) => `${n.toFixed(2)}x`
  const row = (label: string, metric: string, of: Record<Implementation, number>, format: (n: number) => string) => {
    const r = ratios(of)
    return [
      label,
      metric,
      ...implementations.map((impl) => format(of[impl])),
      times(r.oursOverGraphileDefaults),
      times(r.oursOverGraphileBest),
      times(r.oursPrefetchOverGraphileBest),
    ]
  }
  const integer = (n: number) => String(round(n))
  const ms = (n: number) => n.toFixed(2)
  return {
    columns: [
      "case",
      "metric",
      "ours",
      `ours prefetch ${oursPrefetch}`,
      "graphile defaults",
      "graphile best",
      "ours/g-defaults",
      "ours/g-best",
      "prefetch/g-best",
    ],
    rows: [
      row(`(a) enqueue ${bulkJobs}, one call`, "jobs/s", m.enqueueRate, integer),
      row(`(b) process ${processJobs}, c=${concurrency}`, "jobs/s", m.processRate, integer),
      row("", "client cores", m.processCpu.client, ms),
      row("", "server cores", m.processCpu.server, ms),
      row(`(c) ${latencyRate} jobs/s for ${latencySeconds} s`, "p50 ms (lower is better)", m.p50, ms),
      row("", "p95 ms", m.p95, ms),
      row("", "p99 ms", m.p99, ms),
    ],
  }
}

const conditions = (repeats: number) => ({
  repeats,
  concurrency,
  jobs: {
    enqueue: bulkJobs,
    process: processJobs,
    latency: { perSecond: latencyRate, seconds: latencySeconds, jobs: latencyJobs, warmupJobs },
  },
  job: "a no-op: the run function records performance.now() for its arg i and returns",
  enqueue:
    "all 10,000 in one call: ours one Jobs.insert (one INSERT … SELECT FROM unnest of one typed array per column, one pg_notify per queue); graphile one addJobs (one graphile_worker.add_jobs call)",
  process:
    "timed from the worker's start (its layer build / run(), its pool opened lazily inside the window) until the job table holds no unfinished job, polled every 10 ms after the 22,000th run started; the worker is stopped afterwards, untimed. One worker: one JobWorker layer / one graphile-worker run(), in the bench process",
  latency:
    "a running worker, warmed up by 10 jobs and 1 s idle; one insert per job (its own transaction) started open-loop every 5 ms on a separate pool of 4; insert-to-start = run function entered minus insert called (performance.now())",
  betweenRuns:
    "TRUNCATE every runtime's job table (ours: jobs and job_workers; graphile: _private_jobs and _private_job_queues); CHECKPOINT; before (b) also VACUUM ANALYZE of the pre-inserted table and another CHECKPOINT",
  order: "each repeat runs the four in a rotating order; cases run (a), then (b), then (c)",
  sameCode:
    "in (a) the worker settings play no part: ours and ours-prefetch insert through the same Jobs.insert, graphile-defaults and graphile-best through the same addJobs",
  versions: {
    "graphile-worker": packageVersion("graphile-worker"),
    pg: packageVersion("pg"),
    "@effect/sql-pg": packageVersion("@effect/sql-pg"),
    effect: packageVersion("effect"),
  },
  graphilePresets: GraphileJobRuntime.presets,
  cpu: "clientCores: this Node process (which hosts the worker and the inserts); serverCores: the PostgreSQL server's processes; machineBusy: all cores, other tenants included",
  figures:
    "medians over the repeats (of jobs/s; of each run's p50/p95/p99); every run is in results.*.runs; ratios are ours ÷ theirs (for latency lower is better); oursPrefetchOverGraphileBest compares the two at their best settings",
})

const results = (runs: Runs, m: Medians) => ({
  enqueue: {
    jobsPerSecond: mapImplementations((impl) => round(m.enqueueRate[impl])),
    ratio: ratios(m.enqueueRate),
    runs: mapImplementations((impl) =>
      runs.enqueue[impl].map((r) => ({ ...r, jobsPerSecond: round(r.jobsPerSecond), seconds: round3(r.seconds) })),
    ),
  },
  process: {
    jobsPerSecond: mapImplementations((impl) => round(m.processRate[impl])),
    ratio: ratios(m.processRate),
    clientCores: m.processCpu.client,
    serverCores: m.processCpu.server,
    runs: mapImplementations((impl) =>
      runs.processing[impl].map((r) => ({ ...r, jobsPerSecond: round(r.jobsPerSecond), seconds: round3(r.seconds) })),
    ),
  },
  latency: {
    insertToStartMs: mapImplementations((impl) => ({
      p50: round3(m.p50[impl]),
      p95: round3(m.p95[impl]),
      p99: round3(m.p99[impl]),
    })),
    ratio: { p50: ratios(m.p50), p95: ratios(m.p95), p99: ratios(m.p99) },
    runs: runs.latency,
  },
})

const run = Effect.gen(function* () {
  const settings = yield* Throughput.settings
  const bench = yield* setup
  const runs = yield* runCases(bench, settings.repeats)
  const m = medians(runs)
  return {
    conditions: conditions(settings.repeats),
    results: results(runs, m),
    baseline: mapImplementations((impl) => bench.runtimes[impl].description),
    targets: targets(m),
    table: table(m),
  } satisfies Report
})

export default {
  description: "bothy's job runtime vs graphile-worker (defaults, best): bulk enqueue, 22,000 jobs at c=10, latency",
  run: Effect.gen(function* () {
    const server = yield* BenchServer
    // Scoped here, so that the runtimes' pools close while the server still runs.
    return yield* run.pipe(Effect.provide(server.pool(1)), Effect.scoped)
  }),
} satisfies Benchmark
