/**
 * `npm run bench -- append`: appended events/s through `EventLog.append` with 1, 8, 16 and 32
 * concurrent producers, one and then ten events per transaction, in both sequencing modes
 * (`ours`: the counter, `postCommit`: `EventLog.layerPostCommit` with a `Sequencer` running in this
 * process on two connections of its own), next to the two `pg` driver baselines of
 * `AppendBaselines.ts` measured in the same run on the same server. A `postCommit` run also
 * measures commit-to-readable latency (`CommitToReadable`) and, after its window, how long the
 * sequencer took to number what was still pending.
 *
 * Every run starts from the same state (empty log, counter at 0, fresh checkpoint), and the three
 * implementations take turns within each repeat, in a rotating order, so drift on a shared
 * machine falls on all of them alike. After each run of ours (and of the naive baseline, which is
 * gapless too) the log is checked: seqs are exactly 1..N and N is every event acknowledged.
 */
import { Console, Duration, Effect, Latch, Layer, Schema } from "effect"
import { SqlClient } from "effect/sql"
import type { NewEvent } from "../../src/log/Event.ts"
import { type Appended, EventLog } from "../../src/log/EventLog.ts"
import * as Sequencer from "../../src/log/Sequencer.ts"
import * as AppendBaselines from "./AppendBaselines.ts"
import type { Benchmark } from "../harness/Benchmark.ts"
import { BenchServer, pgClientConfig } from "../harness/BenchServer.ts"
import * as CommitToReadable from "./CommitToReadable.ts"
import { packageVersion, round3 } from "../harness/Figures.ts"
import type { Distribution } from "../harness/Distribution.ts"
import type { Report, Target } from "../harness/Report.ts"
import { eventAt } from "../harness/SampleEvent.ts"
import * as Throughput from "../harness/Throughput.ts"

const producerCounts = [1, 8, 16, 32] as const
const batchSizes = [1, 10] as const
const implementations = ["ours", "postCommit", "naive", "plain"] as const
type Implementation = (typeof implementations)[number]

interface Readable {
  /** Commit acknowledged to readable in event_log, per append, ms. */
  readonly commitToReadableMs: Distribution
  /** After the window: until the sequencer had numbered everything still pending. */
  readonly drainSeconds: number
}

type RunResult = Throughput.Run & { readonly repeat: number; readonly verified: boolean } & Partial<Readable>

interface Case {
  readonly case: string
  readonly producers: number
  readonly eventsPerTxn: number
  /** Medians over the repeats. */
  readonly eventsPerSecond: Record<Implementation, number>
  readonly ratio: {
    readonly oursOverNaive: number
    readonly oursOverPlain: number
    readonly postCommitOverPlain: number
    readonly postCommitOverOurs: number
  }
  /** postCommit's commit-to-readable p50 and p95, medians over the repeats, ms. */
  readonly commitToReadableMs: { readonly p50: number; readonly p95: number }
  /** Medians of the CPU this process used, in cores: what each client costs. */
  readonly clientCores: Record<Implementation, number>
  readonly runs: Record<Implementation, ReadonlyArray<RunResult>>
}

/** A run left the log in a state its implementation promises it cannot; its figure is void. */
export class LogCheckFailed extends Schema.TaggedError<LogCheckFailed>()("LogCheckFailed", {
  implementation: Schema.String,
  detail: Schema.String,
}) {
  override get message() {
    return `after a run of ${this.implementation}, event_log does not hold what the producers saw committed: ${this.detail}`
  }
}

const sample: ReadonlyArray<NewEvent> = Array.from({ length: 256 }, (_, i) => eventAt(i))
const payloadBytes = Math.round(
  sample.reduce((sum, e) => sum + Buffer.byteLength(JSON.stringify(e.payload)), 0) / sample.length,
)

/** 64 batches of `size` events drawn from the sample in turn; producers cycle through them. */
const batchesOf = (size: number) =>
  Array.from({ length: 64 }, (_, b) => Array.from({ length: size }, (_, j) => sample[(b * size + j) % sample.length]!))

// The baselines write the same trace_parent column ours fills from the current span.
const traceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
const asRow = (e: NewEvent): AppendBaselines.Row => [e.space, e.type, e.actor, JSON.stringify(e.payload), traceParent]

const reset = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`TRUNCATE event_log, event_log_pending`
  yield* sql`UPDATE event_seq SET value = 0`
  yield* sql`UPDATE event_sequencer SET holder = NULL, expires_at = '-infinity'`
  yield* sql.unsafe("VACUUM event_seq") // the counter row is updated per transaction; start each run unbloated
  yield* sql.unsafe("CHECKPOINT") // so no run pays for the previous run's dirty pages or full-page writes
})

/** Seqs are exactly 1..N, the counter says N, and N is every event a producer saw committed. */
const verifyGapless = (implementation: Implementation, acknowledged: number) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const [row] = yield* sql<{ rows: bigint; seqs: bigint; first: bigint | null; last: bigint | null; head: bigint }>`
      SELECT count(*) AS rows, count(DISTINCT seq) AS seqs, min(seq) AS first, max(seq) AS last,
             (SELECT value FROM event_seq) AS head
      FROM event_log`
    const ok =
      row !== undefined &&
      row.rows === BigInt(acknowledged) &&
      row.seqs === row.rows &&
      row.first === 1n &&
      row.last === row.rows &&
      row.head === row.rows
    if (!ok) {
      return yield* new LogCheckFailed({
        implementation,
        detail: `expected seqs 1..${acknowledged}, found ${JSON.stringify(row, (_, v) => (typeof v === "bigint" ? String(v) : v))}`,
      })
    }
    return true
  })

/** Baseline (b) has no gapless seqs to check, but every acknowledged event must be there. */
const verifyCount = (implementation: Implementation, acknowledged: number) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const [row] = yield* sql<{ rows: bigint }>`SELECT count(*) AS rows FROM event_log`
    if (row?.rows !== BigInt(acknowledged)) {
      return yield* new LogCheckFailed({
        implementation,
        detail: `acknowledged ${acknowledged} events, found ${String(row?.rows)} rows`,
      })
    }
    return true
  })

/**
 * The pool opens connections in the background; holding all of them at once makes it finish, so
 * that ours, like the baselines (whose clients connect before the clock starts), is measured
 * with every connection open and authenticated.
 */
const openEveryConnection = (connections: number) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const allHeld = yield* Latch.make()
    let held = 0
    yield* Effect.forEach(
      Array.from({ length: connections }),
      () =>
        sql.withTransaction(
          Effect.gen(function* () {
            yield* sql`SELECT 1`
            if (++held === connections) yield* allHeld.open
            yield* allHeld.await
          }),
        ),
      { concurrency: "unbounded", discard: true },
    )
  })

/** Until the sequencer has numbered every committed append (no sequencer: never). */
const untilNothingPending = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const pending = sql<{ any: boolean }>`SELECT EXISTS (SELECT FROM event_log_pending) AS any`
  while ((yield* pending)[0]?.any === true) yield* Effect.sleep("2 millis")
})

const round = (n: number) => Math.round(n)
const mapImplementations = <A>(f: (impl: Implementation) => A) =>
  Object.fromEntries(implementations.map((impl) => [impl, f(impl)])) as Record<Implementation, A>

/** One fiber per producer, each committing the batches in turn until the window closes. */
const appendLoops = (
  log: EventLog["Service"],
  producers: number,
  batches: ReadonlyArray<ReadonlyArray<NewEvent>>,
  tally: Throughput.Tally,
  committed?: (appended: Appended) => void,
) =>
  Effect.forEach(
    Array.from({ length: producers }, (_, p) => p),
    (p) =>
      Effect.gen(function* () {
        for (let k = p; !tally.stopped; k++) {
          const batch = batches[k % batches.length]!
          const { appended } = yield* log.appendAfter(Effect.void, () => batch)
          if (committed !== undefined && appended._tag === "Some") committed(appended.value)
          tally.add(batch.length)
        }
      }),
    { concurrency: "unbounded", discard: true },
  )

const run = Effect.gen(function* () {
  const server = yield* BenchServer
  const settings = yield* Throughput.settings
  const pgConfig = pgClientConfig(server)

  const ours = (producers: number, batches: ReadonlyArray<ReadonlyArray<NewEvent>>) =>
    Effect.gen(function* () {
      const log = yield* EventLog
      yield* openEveryConnection(producers)
      return yield* Throughput.measure(settings, (tally) => appendLoops(log, producers, batches, tally))
    }).pipe(Effect.provide(EventLog.layer.pipe(Layer.provideMerge(server.pool(producers)))))

  // The sequencer and the reader on connections of their own, as a worker and a consumer would be.
  const postCommit = (producers: number, batches: ReadonlyArray<ReadonlyArray<NewEvent>>) =>
    Effect.gen(function* () {
      const log = yield* EventLog
      yield* Layer.build(Sequencer.layer().pipe(Layer.provide(server.pool(2))))
      const readable = yield* CommitToReadable.start.pipe(Effect.provide(yield* Layer.build(server.pool(2))))
      yield* openEveryConnection(producers)
      const run = yield* Throughput.measure(settings, (tally) =>
        appendLoops(log, producers, batches, tally, (appended) => {
          if (appended._tag === "Unsequenced") readable.committed(appended.appendId)
        }),
      )
      const drained = yield* Throughput.timed(untilNothingPending)
      return { ...run, commitToReadableMs: readable.distribution(), drainSeconds: round3(drained.seconds) }
    }).pipe(Effect.scoped, Effect.provide(EventLog.layerPostCommit.pipe(Layer.provideMerge(server.pool(producers)))))

  const baseline = (
    kind: AppendBaselines.Baseline,
    producers: number,
    batches: ReadonlyArray<ReadonlyArray<NewEvent>>,
  ) =>
    Effect.gen(function* () {
      const rows = batches.map((b) => b.map(asRow))
      const clients = yield* AppendBaselines.connect(pgConfig, producers)
      return yield* Throughput.measure(settings, (tally) => AppendBaselines.produce(kind, clients, rows, tally))
    }).pipe(Effect.scoped)

  const once = (implementation: Implementation, producers: number, batches: ReadonlyArray<ReadonlyArray<NewEvent>>) =>
    Effect.gen(function* () {
      yield* reset
      const result: Throughput.Run & Partial<Readable> =
        implementation === "ours"
          ? yield* ours(producers, batches)
          : implementation === "postCommit"
            ? yield* postCommit(producers, batches)
            : yield* baseline(implementation, producers, batches)
      const verified =
        implementation === "plain"
          ? yield* verifyCount(implementation, result.committed)
          : yield* verifyGapless(implementation, result.committed)
      return { ...result, verified }
    })

  const cases: Array<Case> = []
  for (const eventsPerTxn of batchSizes) {
    const batches = batchesOf(eventsPerTxn)
    for (const producers of producerCounts) {
      const runs = mapImplementations((): Array<RunResult> => [])
      for (let repeat = 0; repeat < settings.repeats; repeat++) {
        for (let i = 0; i < implementations.length; i++) {
          const implementation = implementations[(i + repeat) % implementations.length]!
          const r = yield* once(implementation, producers, batches)
          runs[implementation].push({ repeat: repeat + 1, ...r })
          const readable =
            r.commitToReadableMs === undefined
              ? ""
              : `, commit-to-readable p50 ${r.commitToReadableMs.p50} p95 ${r.commitToReadableMs.p95} ms, drained in ${r.drainSeconds} s`
          yield* Console.log(
            `${eventsPerTxn} ev/txn, ${producers} producers, ${implementation} #${repeat + 1}: ${round(r.eventsPerSecond)} ev/s (client ${r.clientCores} cores, machine ${Math.round(r.machineBusy * 100)}% busy)${readable}`,
          )
        }
      }
      const median = (impl: Implementation) => Throughput.median(runs[impl].map((r) => r.eventsPerSecond))
      cases.push({
        case: `${eventsPerTxn === 1 ? "single" : `batch${eventsPerTxn}`}-p${producers}`,
        producers,
        eventsPerTxn,
        eventsPerSecond: mapImplementations(median),
        ratio: {
          oursOverNaive: median("ours") / median("naive"),
          oursOverPlain: median("ours") / median("plain"),
          postCommitOverPlain: median("postCommit") / median("plain"),
          postCommitOverOurs: median("postCommit") / median("ours"),
        },
        commitToReadableMs: {
          p50: Throughput.median(runs.postCommit.map((r) => r.commitToReadableMs?.p50 ?? Number.NaN)),
          p95: Throughput.median(runs.postCommit.map((r) => r.commitToReadableMs?.p95 ?? Number.NaN)),
        },
        clientCores: mapImplementations((impl) => Throughput.median(runs[impl].map((r) => r.clientCores))),
        runs,
      })
    }
  }

  const single = (producers: number) => cases.find((c) => c.producers === producers && c.eventsPerTxn === 1)
  const ratioAt8 = (eventsPerTxn: number) =>
    cases.find((c) => c.producers === 8 && c.eventsPerTxn === eventsPerTxn)?.ratio.oursOverNaive ?? Number.NaN
  const target = (name: string, value: number): Target => ({
    name,
    value: round3(value),
    target: 1.0,
    met: value >= 1.0,
  })
  const times = (n: number) => `${n.toFixed(2)}x`

  return {
    conditions: {
      benchSeconds: Duration.toSeconds(settings.window),
      warmupSeconds: Duration.toSeconds(settings.warmup),
      repeats: settings.repeats,
      payloadBytes,
      producers: producerCounts,
      eventsPerTxn: batchSizes,
      connections: "one per producer",
      drivers: {
        ours: `@effect/sql-pg ${packageVersion("@effect/sql-pg")}, a pool with min = max = producers, one fiber per producer`,
        baselines: `pg ${packageVersion("pg")}, one pg.Client per producer, named prepared statements`,
      },
      table:
        "ours, naive and plain write to event_log itself (partitioned by day, primary key (seq, occurred_at)); postCommit writes one event_log_pending row per transaction, which the sequencer moves into event_log",
      sequencer:
        "postCommit only: Sequencer.layer() defaults (poll 5 ms, 1,000 appends per batch) on a pool of 2 in this process; the commit-to-readable reader (LISTEN event_log, then read after its cursor) on another pool of 2",
      betweenRuns:
        "TRUNCATE event_log, event_log_pending; event_seq.value = 0; the sequencer lease freed; VACUUM event_seq; CHECKPOINT",
      order: "each repeat runs ours, postCommit, naive and plain in a rotating order",
      figure: "median events/s over the repeats, each counting events committed inside the window after the warm-up",
    },
    results: cases.map((c) => ({
      ...c,
      eventsPerSecond: mapImplementations((impl) => round(c.eventsPerSecond[impl])),
      ratio: {
        oursOverNaive: round3(c.ratio.oursOverNaive),
        oursOverPlain: round3(c.ratio.oursOverPlain),
        postCommitOverPlain: round3(c.ratio.postCommitOverPlain),
        postCommitOverOurs: round3(c.ratio.postCommitOverOurs),
      },
      runs: mapImplementations((impl) =>
        c.runs[impl].map((r) => ({ ...r, eventsPerSecond: round(r.eventsPerSecond), seconds: round3(r.seconds) })),
      ),
    })),
    baseline: {
      ours: "EventLog.appendAfter(Effect.void, () => batch): BEGIN; one statement (counter UPDATE, INSERT from jsonb_to_recordset, pg_notify); COMMIT. Includes event validation and the trace_parent from the current span.",
      postCommit:
        "the same through EventLog.layerPostCommit: BEGIN; INSERT INTO event_log_pending (one row, the batch as jsonb); COMMIT; a Sequencer numbers the appends into event_log (one statement per batch, NOTIFY per batch). Counted when the producer's commit returns; the run is checked after the sequencer has numbered everything.",
      naive:
        "(a) naive counter, separate round trips: BEGIN; UPDATE event_seq SET value = value + n RETURNING value, epoch; INSERT INTO event_log … VALUES (n rows); COMMIT. No NOTIFY.",
      plain:
        "(b) no counter: BEGIN; the same INSERT INTO event_log; COMMIT, seq from a client-side counter unique per producer (p+1, p+1+P, …), epoch 1; event_seq is never touched. No NOTIFY.",
    },
    targets: [
      target("EventLog.append >= 1.0x baseline (a) at 8 producers, 1 event/txn", ratioAt8(1)),
      target("EventLog.append >= 1.0x baseline (a) at 8 producers, 10 events/txn", ratioAt8(10)),
      {
        name: "post_commit >= 0.8x plain inserts (b) at 16 producers, 1 event/txn",
        value: round3(single(16)?.ratio.postCommitOverPlain ?? Number.NaN),
        target: 0.8,
        met: (single(16)?.ratio.postCommitOverPlain ?? 0) >= 0.8,
      },
      {
        name: "post_commit commit-to-readable p95 <= 10 ms at 8 producers, 1 event/txn",
        value: round3(single(8)?.commitToReadableMs.p95 ?? Number.NaN),
        target: 10,
        met: (single(8)?.commitToReadableMs.p95 ?? Number.POSITIVE_INFINITY) <= 10,
      },
    ],
    table: {
      columns: [
        "case",
        "producers",
        "events/txn",
        "ours ev/s",
        "post_commit ev/s",
        "baseline a ev/s",
        "baseline b ev/s",
        "ours/a",
        "ours/b",
        "post_commit/b",
        "post_commit/ours",
        "readable p50/p95 ms",
      ],
      rows: cases.map((c) => [
        c.case,
        String(c.producers),
        String(c.eventsPerTxn),
        String(round(c.eventsPerSecond.ours)),
        String(round(c.eventsPerSecond.postCommit)),
        String(round(c.eventsPerSecond.naive)),
        String(round(c.eventsPerSecond.plain)),
        times(c.ratio.oursOverNaive),
        times(c.ratio.oursOverPlain),
        times(c.ratio.postCommitOverPlain),
        times(c.ratio.postCommitOverOurs),
        `${c.commitToReadableMs.p50.toFixed(2)} / ${c.commitToReadableMs.p95.toFixed(2)}`,
      ]),
    },
  } satisfies Report
})

export default {
  description:
    "events/s through EventLog.append, counter and post_commit, vs a naive counter and no counter (pg driver), 1/8/16/32 producers",
  run: Effect.gen(function* () {
    const server = yield* BenchServer
    return yield* run.pipe(Effect.provide(server.pool(1)))
  }),
} satisfies Benchmark
