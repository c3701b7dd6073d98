/**
 * Where a delivery's PostgreSQL time goes: the end-to-end run (telemetry off, as `bothy worker`
 * runs without an OTLP endpoint) with the log at `leafDays` days of hourly leaves, as retention
 * keeps it (30 days back and the 14-day runway: 1,056 leaves), and `pg_stat_statements` counting
 * planning and execution per statement from the production window's start (after the set-up:
 * the history rows, a checkpoint). The figures per delivery are the statement's time over the
 * attempts made since (warm-up and drain included, as the counters are). The producer's appends
 * are listed too, marked, and left out of the worker's sum; so is what the harness itself still
 * asks while the run goes on (its 1 s samples, and its checks after the drain).
 *
 * It needs the extension preloaded, with planning tracked:
 * `BENCH_PG_SETTINGS=shared_preload_libraries=pg_stat_statements,pg_stat_statements.track_planning=on`.
 */
import { Console, Effect } from "effect"
import { SqlClient } from "effect/sql"
import * as WebhookEndToEnd from "./WebhookEndToEnd.ts"

export const preloadSettings = "shared_preload_libraries=pg_stat_statements,pg_stat_statements.track_planning=on"

interface StatementRow {
  readonly query: string
  readonly calls: bigint
  readonly plans: bigint
  readonly planMs: number
  readonly execMs: number
}

export interface StatementCost {
  readonly statement: string
  /** The producer's own (appends): outside the worker's count. */
  readonly producer: boolean
  /** The benchmark's own samples and checks: outside the worker's count. */
  readonly harness: boolean
  readonly callsPerDelivery: number
  readonly plansPerCall: number
  readonly planMsPerCall: number
  readonly execMsPerCall: number
  readonly planMsPerDelivery: number
  readonly execMsPerDelivery: number
}

const round4 = (n: number) => Math.round(n * 10_000) / 10_000

/** A statement's text, one line, cut to what names it. */
const named = (query: string) => query.replace(/\s+/g, " ").trim().slice(0, 110)

const isProducer = (query: string) => /INSERT INTO event_log(_pending)?\b|UPDATE event_seq\b/i.test(query)

/** The harness's own statements during the window: `WebhookEndToEnd`'s samples and after-drain checks. */
const isHarness = (query: string) =>
  /pg_stat_activity|pg_stat_checkpointer|pg_stat_statements|FROM webhook_attempts AS a JOIN|SELECT \(SELECT count\(\*\) FROM webhook_deliveries|WITH run AS \(SELECT id, state|SELECT seq, \(payload/i.test(
    query,
  )

const ready = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const [libs] = yield* sql<{ value: string }>`SELECT current_setting('shared_preload_libraries') AS value`
  if (!(libs?.value ?? "").includes("pg_stat_statements"))
    return yield* Effect.die(
      new Error(
        `the statements part needs pg_stat_statements preloaded: run with BENCH_PG_SETTINGS=${preloadSettings}`,
      ),
    )
  yield* sql`CREATE EXTENSION IF NOT EXISTS pg_stat_statements`
})

/** Hourly leaves for `days` days, ending 14 days ahead (the runway); how many the log has then. */
const leaves = (days: number) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    yield* sql`SELECT event_log_ensure_partitions(now() - make_interval(days => ${days - 14}), make_interval(days => ${days}))`
    const [row] = yield* sql<{ n: number }>`
      SELECT count(*)::int AS n FROM pg_partition_tree('event_log') WHERE isleaf`
    return row?.n ?? 0
  })

export const measure = (config: WebhookEndToEnd.EndToEndConfig, options: { readonly leafDays: number }) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    yield* ready
    const leafCount = yield* leaves(options.leafDays)
    yield* Console.log(
      `statements: ${leafCount} event_log leaves; ${config.eventsPerSecond} events/s for ${config.seconds} s`,
    )
    let start = new Date()
    const atProductionStart = Effect.gen(function* () {
      const [row] = yield* sql<{ at: Date }>`SELECT clock_timestamp() AS at, pg_stat_statements_reset()`
      start = row!.at
    }).pipe(Effect.orDie)
    const run = yield* WebhookEndToEnd.measure({ ...config, telemetry: { on: false }, atProductionStart })
    // The run's own: the history it writes first has negative seqs.
    const [attempted] = yield* sql<{ n: number }>`
      SELECT count(*)::int AS n FROM webhook_attempts AS a JOIN webhook_deliveries AS d ON d.id = a.delivery_id
      WHERE a.started_at >= ${start} AND d.event_seq > 0`
    const deliveries = attempted?.n ?? 0
    const rows = yield* sql<StatementRow>`
      SELECT query, calls, plans, total_plan_time AS "planMs", total_exec_time AS "execMs"
      FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
      ORDER BY total_plan_time + total_exec_time DESC`
    const statements = rows
      .map((r): StatementCost => {
        const calls = Number(r.calls)
        return {
          statement: named(r.query),
          producer: isProducer(r.query),
          harness: isHarness(r.query),
          callsPerDelivery: round4(calls / deliveries),
          plansPerCall: round4(Number(r.plans) / Math.max(1, calls)),
          planMsPerCall: round4(r.planMs / Math.max(1, calls)),
          execMsPerCall: round4(r.execMs / Math.max(1, calls)),
          planMsPerDelivery: round4(r.planMs / deliveries),
          execMsPerDelivery: round4(r.execMs / deliveries),
        }
      })
      .filter((s) => s.planMsPerDelivery + s.execMsPerDelivery >= 0.0005)
    const worker = statements.filter((s) => !s.producer && !s.harness)
    const sum = (f: (s: StatementCost) => number) => round4(worker.reduce((a, s) => a + f(s), 0))
    return {
      leaves: leafCount,
      deliveries,
      cpu: run.cpu.bothy,
      latencyP95Ms: run.latencyMs.p95,
      worker: {
        planMsPerDelivery: sum((s) => s.planMsPerDelivery),
        execMsPerDelivery: sum((s) => s.execMsPerDelivery),
        statementsPerDelivery: sum((s) => s.callsPerDelivery),
      },
      statements: statements.slice(0, 25),
    }
  })

export type StatementsResult = Effect.Success<ReturnType<typeof measure>>
