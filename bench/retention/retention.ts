/**
 * `npm run bench -- retention`: what retention costs while the log is in use, on a log of 30 days
 * whose day 20 days back holds BENCH_RETENTION_BIG_DAY (1,000,000) rows and every other day
 * BENCH_RETENTION_DAY_ROWS (10,000).
 *
 *   1. Appends during a detach: a steady BENCH_RETENTION_RATE (500) events/s, one per transaction,
 *      through `EventLog.append` for BENCH_RETENTION_SECONDS (20 s) twice: first with nothing else
 *      running (the same-run baseline), then while `Retention.run` detaches and drops the big day
 *      alone (the days older than it went before, untimed; after a 5 s warm-up window). Append
 *      latency p50/p95/p99 of both windows, and of the appends sent while the detach and drop ran.
 *      What a drop costs depends on the filesystem (see `Retention`): its mount options are in
 *      the conditions, and TMPDIR chooses where the server's data lives.
 *   2. The consumer's read (`EventLog.readFrom` after a cursor row 1,000 events behind the head,
 *      500 events, as the transactional round reads) with 30 days of partitions holding rows (and
 *      14 days ahead, 24 hour leaves each), and again
 *      after retention has left two: median of BENCH_RETENTION_READS (300) reads each. Likewise
 *      the one-statement round (`StatementRound`, a fan-out that wants no job) over the same 500
 *      events, its `ReadWindow` as a running consumer has it, after 100 untimed rounds; the cursor
 *      is put back between rounds, untimed.
 *
 * Targets: append p99 during the detach at most 2x the baseline's; each read with 30
 * days within 1.2x of the same read with 1.
 */
import { Config, Duration, Effect, Fiber } from "effect"
import { SqlClient } from "effect/sql"
import * as ReadWindow from "../../src/consumer/ReadWindow.ts"
import * as StatementRound from "../../src/consumer/StatementRound.ts"
import { EventLog } from "../../src/log/EventLog.ts"
import * as Retention from "../../src/log/Retention.ts"
import type { Benchmark } from "../harness/Benchmark.ts"
import { BenchServer } from "../harness/BenchServer.ts"
import { distribution } from "../harness/Distribution.ts"
import { round3 } from "../harness/Figures.ts"
import type { Report, Target } from "../harness/Report.ts"
import { eventAt } from "../harness/SampleEvent.ts"
import * as Throughput from "../harness/Throughput.ts"

const settings = Config.all({
  bigDay: Config.Int("BENCH_RETENTION_BIG_DAY").pipe(Config.withDefault(1_000_000)),
  dayRows: Config.Int("BENCH_RETENTION_DAY_ROWS").pipe(Config.withDefault(10_000)),
  rate: Config.Number("BENCH_RETENTION_RATE").pipe(Config.withDefault(500)),
  seconds: Config.Number("BENCH_RETENTION_SECONDS").pipe(Config.withDefault(20)),
  reads: Config.Int("BENCH_RETENTION_READS").pipe(Config.withDefault(300)),
})

const dayMillis = 86_400_000
const bigDayAgo = 20

/** 30 days of events in seq order, day `bigDayAgo` back with `bigDay` rows, the others `dayRows`. */
const fill = (bigDay: number, dayRows: number) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const today = Math.floor(Date.now() / dayMillis) * dayMillis
    yield* sql`SELECT event_log_ensure_partitions(${new Date(today - 29 * dayMillis).toISOString()}::timestamptz, interval '29 days')`
    let seq = 0
    for (let ago = 29; ago >= 0; ago--) {
      const rows = ago === bigDayAgo ? bigDay : dayRows
      const start = today - ago * dayMillis
      // Today's rows end an hour before now at the latest, so the appends that follow stay later.
      const span = ago === 0 ? Math.max(1, Date.now() - start - 3_600_000) : dayMillis - 1
      yield* sql`
        INSERT INTO event_log (seq, epoch, occurred_at, space_id, type, actor, payload)
        SELECT ${seq} + i, 1, ${new Date(start).toISOString()}::timestamptz + make_interval(secs => (i - 1) * ${span / rows / 1000}::float8),
               'space-' || (i % 50), 'item.created', 'bench', jsonb_build_object('i', i)
        FROM generate_series(1, ${rows}) AS i`
      seq += rows
    }
    yield* sql`UPDATE event_seq SET value = ${seq}, last_at = (SELECT max(occurred_at) FROM event_log)`
    yield* sql.unsafe("VACUUM ANALYZE event_log")
    yield* sql.unsafe("CHECKPOINT")
    return seq
  })

/**
 * Puts the cursor row `bench` 1,000 events behind the head, as a consumer has it; the position is
 * looked up once. Looking it up by seq at every put-back locked every leaf, and the rounds timed
 * between such statements ran slower with the days kept: 2.09 against 1.51 ms for the same round
 * at 1,033 and 361 leaves, 1.38 against 1.29 ms with the position looked up once (runs of
 * 2026-12-03).
 */
const cursorPutter = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const [position] = yield* sql<{ seq: string; at: string }>`
    SELECT (s.value - 1000)::text AS seq, e.occurred_at::text AS at
    FROM event_seq AS s JOIN event_log AS e ON e.seq = s.value - 1000`
  const put = sql`
    INSERT INTO event_consumer_cursors (name, last_seq, last_at) VALUES ('bench', ${position!.seq}::int8, ${position!.at}::timestamptz)
    ON CONFLICT (name) DO UPDATE SET last_seq = excluded.last_seq, last_at = excluded.last_at`
  yield* put
  return put
})

/** A fan-out that wants no job: the round reads, checks and moves the cursor. */
const noJobs: StatementRound.StatementFanOut = {
  ctes: (sql) => sql`wanted AS (
    SELECT seq, ''::text AS receiver, ''::text AS kind, NULL::text AS queue, '{}'::jsonb AS args, NULL::int AS max_attempts
    FROM ev WHERE false
  )`,
}

const warmUpRounds = 100

/** Median and spread of `reads` reads of 500 events after the `bench` cursor, by both rounds. */
const consumerReads = (reads: number) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const log = yield* EventLog
    const putCursorBack = yield* cursorPutter
    // Read as the transactional round reads it (without the lock).
    const cursor = sql`SELECT last_seq, last_at FROM event_consumer_cursors WHERE name = 'bench'`
    const times: Array<number> = []
    for (let i = 0; i < reads; i++) {
      const t0 = performance.now()
      const read = yield* log.readFrom(cursor, 500)
      times.push(performance.now() - t0)
      if (read._tag === "None" || read.value.events.length !== 500)
        return yield* Effect.die("the read did not return 500 events")
    }
    const roundTimes: Array<number> = []
    let roundsOverNamedDays = 0
    // The first phase is also the process's first use of the round: untimed rounds warm its code
    // and the pool's prepared statements up, so that both phases time the same thing.
    for (let i = -warmUpRounds; i < reads; i++) {
      // A window as a running consumer has it; since the cursor goes back, a fresh one each time.
      const window = yield* ReadWindow.make
      const bounds = yield* window.next("bench")
      if (i >= 0 && StatementRound.namedDays(bounds) !== undefined) roundsOverNamedDays++
      const t0 = performance.now()
      const outcome = yield* StatementRound.make({ name: "bench", batchSize: 500, fanOut: noJobs, window })
      if (i >= 0) roundTimes.push(performance.now() - t0)
      if (outcome?._tag !== "Processed" || outcome.events !== 500)
        return yield* Effect.die(`the round did not process 500 events: ${outcome?._tag}`)
      yield* putCursorBack
    }
    const [counts] = yield* sql<{ days: number; leaves: number }>`
      SELECT (SELECT count(*)::int FROM pg_inherits WHERE inhparent = 'event_log'::regclass) AS days,
             (SELECT count(*)::int FROM pg_partition_tree('event_log') WHERE isleaf) AS leaves`
    return {
      partitions: counts!.days,
      leaves: counts!.leaves,
      ms: distribution(times),
      roundMs: distribution(roundTimes),
      roundsOverNamedDays,
      // Sampled on one of the pool's connections.
      roundPlans: yield* sql<{ generic: string; custom: string }>`
        SELECT generic_plans::text AS generic, custom_plans::text AS custom FROM pg_prepared_statements
        WHERE statement LIKE '%FOR UPDATE SKIP LOCKED%'`,
    }
  })

/** Append latency at a steady rate for `seconds`, with `alongside` running from the start. */
const appendWindow = <A, E>(rate: number, seconds: number, alongside: Effect.Effect<A, E, SqlClient.SqlClient>) =>
  Effect.gen(function* () {
    const log = yield* EventLog
    const total = Math.round(rate * seconds)
    const ms = new Float64Array(total).fill(Number.NaN)
    const lateTick = new Float64Array(total).fill(Number.NaN)
    const side = yield* Effect.forkChild(Effect.timed(alongside))
    yield* Throughput.steady({ total, interval: 1000 / rate, t0: performance.now() + 10, lateTick }, (i, sent) =>
      log.append([eventAt(i)]).pipe(
        Effect.tap(() => Effect.sync(() => (ms[i] = performance.now() - sent))),
        Effect.asVoid,
        Effect.orDie,
      ),
    )
    const [took, result] = yield* Effect.orDie(Fiber.join(side))
    const alongsideMs = Duration.toMillis(took)
    // The appends sent while `alongside` ran: the window starts with it, one append every 1/rate s.
    const whileAlongside = [...ms].slice(0, Math.max(1, Math.ceil((alongsideMs * rate) / 1000)))
    return {
      appendMs: distribution([...ms]),
      whileAlongsideMs: distribution(whileAlongside),
      alongsideMs: round3(alongsideMs),
      alongside: result,
    }
  })

const run = Effect.gen(function* () {
  const config = yield* settings
  const events = yield* fill(config.bigDay, config.dayRows)
  const reads30 = yield* consumerReads(config.reads)
  // A first window warms the producer's path up (JIT, connections), while the days older than the
  // big one go, so that the measured run detaches and drops that day alone; its figures are not used.
  yield* appendWindow(config.rate, 5, Retention.run({ retention: Duration.days(bigDayAgo), dropPause: Duration.zero }))
  const baseline = yield* appendWindow(config.rate, config.seconds, Effect.void)
  const during = yield* appendWindow(
    config.rate,
    config.seconds,
    Retention.run({ retention: Duration.days(bigDayAgo - 1) }),
  )
  yield* Retention.run({ retention: Duration.days(1) })
  const reads1 = yield* consumerReads(config.reads)
  // The appends sent while the detach and drop ran, against the whole window without one.
  const p99Ratio = round3(during.whileAlongsideMs.p99 / baseline.appendMs.p99)
  const readRatio = round3(reads30.ms.p50 / reads1.ms.p50)
  const roundRatio = round3(reads30.roundMs.p50 / reads1.roundMs.p50)
  const targets: ReadonlyArray<Target> = [
    { name: "append p99 during detach / without (x)", value: p99Ratio, target: 2, met: p99Ratio <= 2 },
    { name: "consumer read, 30 days / 1 day of partitions (x)", value: readRatio, target: 1.2, met: readRatio <= 1.2 },
    {
      name: "one-statement round, 30 days / 1 day of partitions (x)",
      value: roundRatio,
      target: 1.2,
      met: roundRatio <= 1.2,
    },
  ]
  const row = (name: string, d: { p50: number; p95: number; p99: number }) => [name, `${d.p50}`, `${d.p95}`, `${d.p99}`]
  return {
    conditions: {
      ...config,
      eventsBefore: events,
      producerConnections: 8,
      eventsPerTransaction: 1,
      dropPauseMs: Duration.toMillis(Retention.dropPause),
    },
    results: { baseline, during, reads30, reads1, p99Ratio, readRatio, roundRatio },
    baseline: {
      appends: "the same producer, same rate, just before, without a detach",
      reads: "the same read with 2 partitions left",
    },
    targets,
    table: {
      columns: ["case", "p50 ms", "p95 ms", "p99 ms"],
      rows: [
        row("append, no detach", baseline.appendMs),
        row(
          `append, window with a detach + drop of ${(during.alongside as Retention.RetentionRun).dropped.length} days`,
          during.appendMs,
        ),
        row(`append, sent while the detach + drop ran (${during.alongsideMs} ms)`, during.whileAlongsideMs),
        row(`consumer read, ${reads30.partitions} days (${reads30.leaves} leaves)`, reads30.ms),
        row(`consumer read, ${reads1.partitions} days (${reads1.leaves} leaves)`, reads1.ms),
        row(`one-statement round, ${reads30.partitions} days`, reads30.roundMs),
        row(`one-statement round, ${reads1.partitions} days`, reads1.roundMs),
      ],
    },
  } satisfies Report
})

export default {
  description:
    "append latency while a 1M-row day is detached and dropped; the consumer's read with 30 vs 1 days of partitions",
  smoke: {
    BENCH_RETENTION_BIG_DAY: "5000",
    BENCH_RETENTION_DAY_ROWS: "200",
    BENCH_RETENTION_RATE: "100",
    BENCH_RETENTION_SECONDS: "2",
    BENCH_RETENTION_READS: "10",
  },
  run: Effect.gen(function* () {
    const server = yield* BenchServer
    return yield* run.pipe(Effect.provide(EventLog.layer), Effect.provide(server.pool(8)))
  }),
} satisfies Benchmark
