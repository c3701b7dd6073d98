/**
 * `npm run bench -- consumer`: what a consumer costs, in three parts, each next to a plain `pg`
 * baseline measured in the same run on the same server (see `ConsumerBaselines.ts`).
 *
 *   1. Round throughput: a backlog (BENCH_BACKLOG events, appended in big transactions before the
 *      clock starts) drained by `Consumer.makeRound` rounds back to back until caught up, at batch
 *      sizes 100, 500 and 1000 and 1 or 10 receivers per event, against raw rounds doing the same
 *      reads and writes. Every run starts from the same state (no jobs, cursor before the backlog)
 *      and is checked afterwards: one job per (event, receiver), cursor at the head.
 *   2. Handoff latency (`Handoff.ts`): commit of an event to commit of its job, with the consumer
 *      running for real at a steady BENCH_HANDOFF_RATE events/s for BENCH_HANDOFF_SECONDS.
 *   3. `Jobs.insert` of 1,000 rows per statement against the same rows through `unnest` on `pg`,
 *      with diagnostic steps (no indexes; the conflict clause; `Jobs.insert`'s own statement on
 *      `pg`) that split the gap into its causes.
 *
 * Ours is traced with `RoundTrace` and the raw rounds time their statements, so each case also
 * says where a round's time goes, phase by phase, on both sides.
 *
 * Implementations take turns within each repeat, in a rotating order, so drift on a shared
 * machine falls on all of them alike.
 */
import { Config, Console, Duration, Effect, Layer, Schema } from "effect"
import { SqlClient } from "effect/sql"
import * as Consumer from "../../src/consumer/Consumer.ts"
import type { FanOutJob } from "../../src/consumer/ConsumerRound.ts"
import { type JobInsert, Jobs } from "../../src/jobs/Jobs.ts"
import { EventLog } from "../../src/log/EventLog.ts"
import type { Benchmark } from "../harness/Benchmark.ts"
import { BenchServer, pgClientConfig } from "../harness/BenchServer.ts"
import * as ConsumerBaselines from "./ConsumerBaselines.ts"
import { packageVersion, round0, round3 } from "../harness/Figures.ts"
import * as Handoff from "../harness/Handoff.ts"
import type { Report, Target } from "../harness/Report.ts"
import * as RoundTrace from "../harness/RoundTrace.ts"
import { eventAt } from "../harness/SampleEvent.ts"
import * as Throughput from "../harness/Throughput.ts"

const batchSizes = [100, 500, 1000] as const
const receiverCounts = [1, 10] as const
const roundImplementations = ["ours", "raw"] as const
const insertImplementations = ["ours", "raw", "rawUnindexed", "rawOnConflict", "oursStatement"] as const
type InsertImplementation = (typeof insertImplementations)[number]
const mapInserts = <A>(f: (impl: InsertImplementation) => A) =>
  Object.fromEntries(insertImplementations.map((impl) => [impl, f(impl)])) as Record<InsertImplementation, A>
const insertRows = 1000
const consumer = "bench_rounds"
const kind = "bench.deliver"

const settings = Config.all({
  throughput: Throughput.settings,
  backlog: Config.Int("BENCH_BACKLOG").pipe(Config.withDefault(20_000)),
  handoffRate: Config.Number("BENCH_HANDOFF_RATE").pipe(Config.withDefault(500)),
  handoffSeconds: Config.Number("BENCH_HANDOFF_SECONDS").pipe(Config.withDefault(20)),
  handoffWhatIf: Config.Boolean("BENCH_HANDOFF_WHATIF").pipe(Config.withDefault(true)),
})

/** The figures of a handoff run worth printing as it ends; the file gets everything. */
const summary = (h: Handoff.HandoffResult) => ({
  events: h.events,
  achievedEventsPerSecond: h.achievedEventsPerSecond,
  latencyMs: h.latencyMs,
  breakdownMs: h.breakdownMs,
  appendMs: h.producer.appendMs,
  clientCores: h.clientCores,
  machineBusy: h.machineBusy,
  fdatasyncMsAfter: h.fdatasyncMsAfter,
  roundPhasesMsP50: Object.fromEntries(Object.entries(h.rounds.phasesMs).map(([k, d]) => [k, d.p50])),
  eventsPerRound: h.rounds.eventsPerRound,
})

/** A run left jobs or cursor in a state the implementation promises it cannot; its figure is void. */
export class DrainCheckFailed extends Schema.TaggedError<DrainCheckFailed>()("DrainCheckFailed", {
  implementation: Schema.String,
  detail: Schema.String,
}) {
  override get message() {
    return `after a drain by ${this.implementation}, jobs and cursor are not what it promises: ${this.detail}`
  }
}

// The fan-out of test/support/TestConsumer.ts: every event to receivers r0, r1, …
const fanOut = (seq: bigint, receivers: number): Array<FanOutJob> =>
  Array.from({ length: receivers }, (_, r) => ({
    seq,
    receiver: `r${r}`,
    kind,
    args: { seq: seq.toString(), receiver: `r${r}` },
  }))

// The same jobs as the baseline writes them, unique key as ConsumerRound derives it.
const rawFanOut =
  (receivers: number) => (events: ReadonlyArray<{ readonly seq: string; readonly traceParent: string | null }>) =>
    events.flatMap((e) =>
      Array.from(
        { length: receivers },
        (_, r): ConsumerBaselines.JobRow => ({
          kind,
          args: { seq: e.seq, receiver: `r${r}` },
          uniqueKey: `${consumer}:${e.seq}:r${r}`,
          traceParent: e.traceParent,
        }),
      ),
    )

// Part 3's rows: call k's 1,000 jobs, fresh unique keys each call.
const traceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
const insertBatch = (k: number): Array<ConsumerBaselines.JobRow> =>
  Array.from({ length: insertRows }, (_, i) => ({
    kind,
    args: { seq: String(k * insertRows + i), receiver: "r0" },
    uniqueKey: `insert:${k}:${i}`,
    traceParent,
  }))
const asJobInsert = (row: ConsumerBaselines.JobRow): JobInsert => ({
  kind: row.kind,
  args: row.args,
  uniqueKey: row.uniqueKey,
  traceParent: row.traceParent,
})

const times = (n: number) => `${n.toFixed(2)}x`
interface DrainRun {
  readonly repeat: number
  readonly eventsPerSecond: number
  readonly jobsPerSecond: number
  readonly seconds: number
  readonly events: number
  readonly jobs: number
  readonly rounds: number
  readonly clientCores: number
  readonly machineBusy: number
  /** Mean ms per round in each phase (`RoundTrace` for ours, the statements' round trips for raw). */
  readonly phasesMsPerRound: Readonly<Record<string, number>>
  readonly verified: boolean
}

type InsertRun = Throughput.Run & { readonly repeat: number }

interface RoundCase {
  readonly case: string
  readonly batchSize: number
  readonly receivers: number
  /** Medians over the repeats. */
  readonly eventsPerSecond: { readonly ours: number; readonly raw: number }
  readonly jobsPerSecond: { readonly ours: number; readonly raw: number }
  readonly ratio: number
  readonly clientCores: { readonly ours: number; readonly raw: number }
  /** Per phase, the median over the repeats of the mean ms per round. */
  readonly phasesMsPerRound: {
    readonly ours: Readonly<Record<string, number>>
    readonly raw: Readonly<Record<string, number>>
  }
  readonly runs: { readonly ours: ReadonlyArray<DrainRun>; readonly raw: ReadonlyArray<DrainRun> }
}

const run = Effect.gen(function* () {
  const server = yield* BenchServer
  const sql = yield* SqlClient.SqlClient
  const config = yield* settings
  const repeats = config.throughput.repeats
  const pgConfig = pgClientConfig(server)
  const ours = yield* Layer.build(Layer.mergeAll(EventLog.layer, Jobs.layer).pipe(Layer.provideMerge(server.pool(1))))
  const client = yield* ConsumerBaselines.connect(pgConfig)

  // ---- the backlog, once: rounds only read it ----
  yield* sql`INSERT INTO event_consumer_cursors (name, last_seq) SELECT ${consumer}, value FROM event_seq`
  const before = (yield* EventLog.pipe(
    Effect.flatMap((log) => log.head),
    Effect.provide(ours),
  )).seq
  for (let i = 0; i < config.backlog; i += 1000) {
    const batch = Array.from({ length: Math.min(1000, config.backlog - i) }, (_, j) => eventAt(i + j))
    yield* EventLog.pipe(
      Effect.flatMap((log) => log.append(batch)),
      Effect.provide(ours),
    )
  }
  const head = before + BigInt(config.backlog)
  yield* sql.unsafe("VACUUM ANALYZE event_log")
  yield* Console.log(`backlog: ${config.backlog} events appended (seqs ${before + 1n}..${head})`)

  const reset = Effect.gen(function* () {
    yield* sql`TRUNCATE jobs`
    yield* sql`UPDATE event_consumer_cursors SET last_seq = ${before} WHERE name = ${consumer}`
    yield* sql.unsafe("VACUUM event_consumer_cursors") // updated once per round; start each run unbloated
    yield* sql.unsafe("CHECKPOINT") // no run pays for the previous run's dirty pages
  })

  const verifyDrain = (implementation: string, receivers: number) =>
    Effect.gen(function* () {
      const [row] = yield* sql<{ jobs: bigint; keys: bigint; cursor: bigint }>`
        SELECT count(*) AS jobs, count(DISTINCT unique_key) AS keys,
               (SELECT last_seq FROM event_consumer_cursors WHERE name = ${consumer}) AS cursor
        FROM jobs`
      const expected = BigInt(config.backlog * receivers)
      if (row?.jobs !== expected || row.keys !== expected || row.cursor !== head) {
        return yield* new DrainCheckFailed({
          implementation,
          detail: `expected ${expected} jobs with distinct keys and cursor ${head}, found ${String(row?.jobs)} jobs, ${String(row?.keys)} keys, cursor ${String(row?.cursor)}`,
        })
      }
      return true
    })

  // ---- 1. round throughput ----
  const drainOurs = (batchSize: number, receivers: number) => {
    const recorder = RoundTrace.recorder()
    return Effect.gen(function* () {
      const round = yield* Consumer.makeRound({
        name: consumer,
        batchSize,
        onLoss: () => Effect.void,
        fanOut: (events) => Effect.succeed(events.flatMap((e) => fanOut(e.seq, receivers))),
      })
      let events = 0
      let jobs = 0
      let rounds = 0
      const phasesMs = Object.fromEntries(RoundTrace.phaseNames.map((p) => [p, 0])) as RoundTrace.Phases
      for (;;) {
        const outcome = yield* round
        const returnedAt = performance.now()
        if (outcome._tag === "CaughtUp") return { events, jobs, rounds, phasesMs }
        if (outcome._tag !== "Processed") return yield* Effect.die(`unexpected round outcome ${outcome._tag}`)
        const trace = recorder.lastEnded()
        const split = trace === undefined ? undefined : RoundTrace.phases(trace, returnedAt)
        for (const p of RoundTrace.phaseNames) phasesMs[p] += split?.[p] ?? Number.NaN
        events += outcome.events
        jobs += outcome.jobs
        rounds++
      }
    }).pipe(Effect.provide(ours), Effect.withTracer(recorder.tracer))
  }

  const drainOnce = (implementation: (typeof roundImplementations)[number], batchSize: number, receivers: number) =>
    Effect.gen(function* () {
      yield* reset
      const drain: Effect.Effect<ConsumerBaselines.Drained, unknown> =
        implementation === "ours"
          ? drainOurs(batchSize, receivers)
          : ConsumerBaselines.drain(client, consumer, before, batchSize, rawFanOut(receivers))
      const r = yield* Throughput.timed(drain)
      const verified = yield* verifyDrain(implementation, receivers)
      const { phasesMs, ...drained } = r.value
      return {
        eventsPerSecond: drained.events / r.seconds,
        jobsPerSecond: drained.jobs / r.seconds,
        seconds: r.seconds,
        ...drained,
        clientCores: r.clientCores,
        machineBusy: r.machineBusy,
        phasesMsPerRound: Object.fromEntries(
          Object.entries(phasesMs).map(([phase, ms]) => [phase, round3(ms / drained.rounds)]),
        ),
        verified,
      }
    })

  const roundCases: Array<RoundCase> = []
  for (const receivers of receiverCounts) {
    for (const batchSize of batchSizes) {
      const runs = { ours: [] as Array<DrainRun>, raw: [] as Array<DrainRun> }
      for (let repeat = 0; repeat < repeats; repeat++) {
        for (let i = 0; i < roundImplementations.length; i++) {
          const implementation = roundImplementations[(i + repeat) % roundImplementations.length]!
          const r = yield* drainOnce(implementation, batchSize, receivers)
          runs[implementation].push({ repeat: repeat + 1, ...r })
          yield* Console.log(
            `rounds: batch ${batchSize}, ${receivers} receivers, ${implementation} #${repeat + 1}: ${round0(r.eventsPerSecond)} events/s, ${round0(r.jobsPerSecond)} jobs/s (client ${r.clientCores} cores, machine ${Math.round(r.machineBusy * 100)}% busy)`,
          )
        }
      }
      const median = (impl: "ours" | "raw") => Throughput.median(runs[impl].map((r) => r.eventsPerSecond))
      roundCases.push({
        case: `batch${batchSize}-r${receivers}`,
        batchSize,
        receivers,
        eventsPerSecond: { ours: round0(median("ours")), raw: round0(median("raw")) },
        jobsPerSecond: { ours: round0(median("ours") * receivers), raw: round0(median("raw") * receivers) },
        ratio: round3(median("ours") / median("raw")),
        clientCores: {
          ours: Throughput.median(runs.ours.map((r) => r.clientCores)),
          raw: Throughput.median(runs.raw.map((r) => r.clientCores)),
        },
        phasesMsPerRound: { ours: medianPhases(runs.ours), raw: medianPhases(runs.raw) },
        runs: {
          ours: runs.ours.map(roundDrainRun),
          raw: runs.raw.map(roundDrainRun),
        },
      })
    }
  }

  // ---- 3. Jobs.insert, 1,000 rows a statement ----
  yield* sql.unsafe(ConsumerBaselines.createUnindexedTable)
  const insertOnce = (implementation: InsertImplementation) =>
    Effect.gen(function* () {
      yield* sql.unsafe(`TRUNCATE jobs, ${ConsumerBaselines.unindexedTable}`)
      yield* sql.unsafe("CHECKPOINT")
      if (implementation !== "ours") {
        return yield* Throughput.measure(config.throughput, (tally) =>
          ConsumerBaselines.insertLoop(implementation, client, insertBatch, tally),
        )
      }
      return yield* Throughput.measure(config.throughput, (tally) =>
        Effect.gen(function* () {
          const jobs = yield* Jobs
          for (let k = 0; !tally.stopped; k++) {
            const inserted = yield* jobs.insert(insertBatch(k).map(asJobInsert))
            tally.add(inserted.inserted)
          }
        }),
      ).pipe(Effect.provide(ours))
    })
  const insertRuns = mapInserts((): Array<InsertRun> => [])
  for (let repeat = 0; repeat < repeats; repeat++) {
    for (let i = 0; i < insertImplementations.length; i++) {
      const implementation = insertImplementations[(i + repeat) % insertImplementations.length]!
      const r = yield* insertOnce(implementation)
      insertRuns[implementation].push({ repeat: repeat + 1, ...r })
      yield* Console.log(
        `Jobs.insert ${insertRows} rows, ${implementation} #${repeat + 1}: ${round0(r.eventsPerSecond)} rows/s (client ${r.clientCores} cores, machine ${Math.round(r.machineBusy * 100)}% busy)`,
      )
    }
  }
  const insertMedian = (impl: InsertImplementation) => Throughput.median(insertRuns[impl].map((r) => r.eventsPerSecond))
  const jobsInsert = {
    rowsPerStatement: insertRows,
    rowsPerSecond: mapInserts((impl) => round0(insertMedian(impl))),
    ratio: {
      oursOverRaw: round3(insertMedian("ours") / insertMedian("raw")),
      rawUnindexedOverRaw: round3(insertMedian("rawUnindexed") / insertMedian("raw")),
      // The gap's causes, one step each: the conflict clause, the rest of the statement, the client.
      rawOnConflictOverRaw: round3(insertMedian("rawOnConflict") / insertMedian("raw")),
      oursStatementOverRawOnConflict: round3(insertMedian("oursStatement") / insertMedian("rawOnConflict")),
      oursOverOursStatement: round3(insertMedian("ours") / insertMedian("oursStatement")),
    },
    clientCores: mapInserts((impl) => Throughput.median(insertRuns[impl].map((r) => r.clientCores))),
    runs: mapInserts((impl) => insertRuns[impl].map(roundInsertRun)),
  }

  // ---- 2. handoff latency ----
  const handoffConfig = {
    eventsPerSecond: config.handoffRate,
    seconds: config.handoffSeconds,
    warmupSeconds: Duration.toSeconds(config.throughput.warmup),
    batchSize: 500,
    pollInterval: Duration.seconds(1),
    receivers: 1,
    producerConnections: 4,
    consumerConnections: 2,
  }
  yield* Console.log(
    `handoff: ${handoffConfig.eventsPerSecond} events/s for ${handoffConfig.seconds} s (after ${handoffConfig.warmupSeconds} s warm-up)`,
  )
  const handoffWith = (consumerSession: Readonly<Record<string, string>>) =>
    Handoff.measure({
      ...handoffConfig,
      consumerSession,
      event: eventAt(0),
      fanOut,
    })
  const handoff = yield* handoffWith({})
  yield* Console.log(`handoff: ${JSON.stringify(summary(handoff), null, 2)}`)
  // Diagnostic only, never the target figure: the same run with the consumer's own transactions
  // committed asynchronously (producers stay durable), to price the WAL flush a round waits for.
  const asyncCommit = config.handoffWhatIf ? yield* handoffWith({ synchronous_commit: "off" }) : undefined
  if (asyncCommit !== undefined) {
    yield* Console.log(
      `handoff what-if (consumer synchronous_commit=off): ${JSON.stringify(summary(asyncCommit), null, 2)}`,
    )
  }

  // ---- report ----
  const ratioAt = (batchSize: number, receivers: number) =>
    roundCases.find((c) => c.batchSize === batchSize && c.receivers === receivers)?.ratio ?? Number.NaN
  const atLeast = (name: string, value: number, target: number): Target => ({
    name,
    value: round3(value),
    target,
    met: value >= target,
  })
  const atMost = (name: string, value: number, target: number): Target => ({
    name,
    value: round3(value),
    target,
    met: value <= target,
  })
  const latency = handoff.latencyMs

  return {
    conditions: {
      benchSeconds: Duration.toSeconds(config.throughput.window),
      warmupSeconds: Duration.toSeconds(config.throughput.warmup),
      repeats,
      rounds: {
        backlogEvents: config.backlog,
        backlogAppend:
          "EventLog.append, 1,000 events per transaction, before any timing; then VACUUM ANALYZE event_log",
        batchSizes,
        receivers: receiverCounts,
        concurrency: "one consumer, rounds back to back on one connection (ours: @effect/sql-pg pool of 1)",
        fanOut: "receivers jobs per event, as test/support/TestConsumer.ts fanOutJobs (args { seq, receiver })",
        betweenRuns:
          "TRUNCATE jobs; cursor back to the seq before the backlog; VACUUM event_consumer_cursors; CHECKPOINT",
        check: "after every run: backlog × receivers jobs, all unique keys distinct, cursor at the head",
        figure: "median over the repeats of backlog / time from the first round's start to the caught-up round's end",
      },
      handoff: {
        ...handoffConfig,
        whatIfAsyncCommit: config.handoffWhatIf,
        pollInterval: "1 second",
        producer:
          "one fiber ticking every 1/rate s, forking each append (one event per autocommitted EventLog.append) without waiting for the previous one",
        consumer: "Consumer.layer + NotificationStream.layer() (channels event_log, jobs), batch 500, poll 1 s",
        stamps:
          "performance.now() in one process: commit = the append returned; job = the round that created it returned Processed (onRound)",
        process: "producer, consumer and listener share one Node process; PostgreSQL on the same 2 cores",
      },
      jobsInsert: {
        rowsPerStatement: insertRows,
        statement:
          "autocommitted, one statement per call, fresh unique keys each call; TRUNCATE jobs and CHECKPOINT before each run",
      },
      drivers: {
        ours: `@effect/sql-pg ${packageVersion("@effect/sql-pg")}, effect ${packageVersion("effect")}`,
        baselines: `pg ${packageVersion("pg")}, one pg.Client, named prepared statements`,
      },
      order: "each repeat runs the implementations in a rotating order",
    },
    results: {
      rounds: roundCases,
      jobsInsert,
      handoff,
      ...(asyncCommit === undefined
        ? {}
        : {
            handoffWhatIfAsyncCommit: {
              note: "diagnostic, not the target figure: the consumer's connections ran with synchronous_commit=off (startup parameter); producers and the server stayed durable",
              ...asyncCommit,
            },
          }),
    },
    baseline: {
      rounds: {
        ours: "Consumer.makeRound: BEGIN; EventLog.readFrom (cursor FOR UPDATE SKIP LOCKED, batch + 1 events and the head, one statement); fan-out; Jobs.insert (validate, unnest of typed arrays, ON CONFLICT DO NOTHING, pg_notify('jobs'), the cursor UPDATE in the same statement); COMMIT; metrics",
        raw: "pg: BEGIN; SELECT seq, epoch, occurred_at, space_id, type, actor, payload, trace_parent FROM event_log WHERE seq > $1 ORDER BY seq LIMIT $2; INSERT INTO jobs (kind, args, unique_key, trace_parent) SELECT * FROM unnest($1::text[], $2::jsonb[], $3::text[], $4::text[]); UPDATE event_consumer_cursors SET last_seq = $1; COMMIT. Same job rows; no cursor lock, head read, validation, ON CONFLICT or NOTIFY.",
      },
      jobsInsert: {
        ours: "Jobs.insert(1,000 JobInsert) outside a transaction: Schema validation per row, column arrays, one statement (unnest of typed arrays, ON CONFLICT DO NOTHING, pg_notify per queue)",
        raw: "pg: INSERT INTO jobs (kind, args, unique_key, trace_parent) SELECT * FROM unnest($1::text[], $2::jsonb[], $3::text[], $4::text[]), the same rows",
        rawUnindexed: `pg: the raw insert into ${ConsumerBaselines.unindexedTable} (LIKE jobs INCLUDING DEFAULTS INCLUDING IDENTITY: no indexes, no checks), what the rows cost without jobs' three indexes`,
        rawOnConflict: "pg: the raw insert plus ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL DO NOTHING",
        oursStatement:
          "pg running Jobs.insert's exact statement with the same column arrays: ours / oursStatement is the client's share (validation, arrays, Effect), oursStatement / rawOnConflict the rest of the statement's (unnest, coalesce, RETURNING, NOTIFY)",
      },
      handoff: "no baseline: targets from the issue",
    },
    targets: [
      atLeast("round throughput ours/raw >= 0.5 at batch 500, 1 receiver", ratioAt(500, 1), 0.5),
      atLeast("round throughput ours/raw >= 0.5 at batch 500, 10 receivers", ratioAt(500, 10), 0.5),
      atMost("handoff latency p95 <= 10 ms", latency.p95, 10),
      atMost("handoff latency p99 <= 25 ms", latency.p99, 25),
    ],
    table: {
      columns: ["measure", "case", "unit", "ours", "baseline", "ours/baseline", "target"],
      rows: [
        ...roundCases.map((c) => [
          "round throughput",
          `batch ${c.batchSize}, ${c.receivers} receiver${c.receivers === 1 ? "" : "s"}`,
          "events/s",
          String(c.eventsPerSecond.ours),
          String(c.eventsPerSecond.raw),
          times(c.ratio),
          c.batchSize === 500 ? ">= 0.50x" : "",
        ]),
        [
          "Jobs.insert",
          `${insertRows} rows/statement`,
          "rows/s",
          String(jobsInsert.rowsPerSecond.ours),
          String(jobsInsert.rowsPerSecond.raw),
          times(jobsInsert.ratio.oursOverRaw),
          "",
        ],
        ...(["rawUnindexed", "rawOnConflict", "oursStatement"] as const).map((impl) => [
          {
            rawUnindexed: "diag: raw, no indexes",
            rawOnConflict: "diag: raw + ON CONFLICT",
            oursStatement: "diag: Jobs.insert SQL on pg",
          }[impl],
          `${insertRows} rows/statement`,
          "rows/s",
          String(jobsInsert.rowsPerSecond[impl]),
          String(jobsInsert.rowsPerSecond.raw),
          times(insertMedian(impl) / insertMedian("raw")),
          "",
        ]),
        ...(["p50", "p95", "p99", "max"] as const).map((q) => [
          "handoff latency",
          `${q} of ${latency.count} events`,
          "ms",
          latency[q].toFixed(2),
          "",
          "",
          q === "p95" ? "<= 10" : q === "p99" ? "<= 25" : "",
        ]),
        [
          "handoff rate",
          `${handoffConfig.eventsPerSecond} asked`,
          "events/s",
          String(handoff.achievedEventsPerSecond),
          "",
          "",
          "",
        ],
        ...(asyncCommit === undefined
          ? []
          : (["p50", "p95", "p99"] as const).map((q) => [
              "what-if: rounds async commit",
              `${q} of ${asyncCommit.latencyMs.count} events`,
              "ms",
              asyncCommit.latencyMs[q].toFixed(2),
              "",
              "",
              "diagnostic",
            ])),
      ],
    },
  } satisfies Report
})

const medianPhases = (runs: ReadonlyArray<DrainRun>) =>
  Object.fromEntries(
    Object.keys(runs[0]?.phasesMsPerRound ?? {}).map((phase) => [
      phase,
      round3(Throughput.median(runs.map((r) => r.phasesMsPerRound[phase] ?? Number.NaN))),
    ]),
  )

const roundDrainRun = (r: DrainRun) => ({
  ...r,
  eventsPerSecond: round0(r.eventsPerSecond),
  jobsPerSecond: round0(r.jobsPerSecond),
  seconds: round3(r.seconds),
})
// Throughput counts "events"; here they are job rows.
const roundInsertRun = ({ eventsPerSecond, events, committed, seconds, ...r }: InsertRun) => ({
  ...r,
  rowsPerSecond: round0(eventsPerSecond),
  rows: events,
  committedRows: committed,
  seconds: round3(seconds),
})

export default {
  description: "consumer rounds events/s vs raw pg rounds, handoff latency at a steady rate, Jobs.insert vs pg unnest",
  run: Effect.gen(function* () {
    const server = yield* BenchServer
    // Scoped here: the runner stops the server when its layer is released, before the scope it
    // hands benchmarks closes, and the pg client and pools must end first.
    return yield* run.pipe(Effect.provide(server.pool(1)), Effect.scoped)
  }),
} satisfies Benchmark
