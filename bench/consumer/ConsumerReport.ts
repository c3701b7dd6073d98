/**
 * What `consumer` reports: its conditions, the baselines each part is compared with, the targets
 * and the table, from the three parts' figures.
 */
import { Duration } from "effect"
import { packageVersion, round3, times } from "../harness/Figures.ts"
import type * as Handoff from "../harness/Handoff.ts"
import type { Report, Target } from "../harness/Report.ts"
import type * as Throughput from "../harness/Throughput.ts"
import * as ConsumerBaselines from "./ConsumerBaselines.ts"
import { insertRows } from "./ConsumerSample.ts"
import type { handoffConfigOf } from "./HandoffLatency.ts"
import type { JobsInsertResult } from "./JobsInsert.ts"
import { batchSizes, type RoundCase, receiverCounts } from "./RoundThroughput.ts"

export interface Figures {
  readonly config: {
    readonly throughput: Throughput.Settings
    readonly backlog: number
    readonly handoffWhatIf: boolean
  }
  readonly handoffConfig: ReturnType<typeof handoffConfigOf>
  readonly roundCases: ReadonlyArray<RoundCase>
  readonly jobsInsert: JobsInsertResult
  readonly handoff: Handoff.HandoffResult
  readonly asyncCommit: Handoff.HandoffResult | undefined
}

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

const conditions = ({ config, handoffConfig }: Figures) => {
  const repeats = config.throughput.repeats
  return {
    benchSeconds: Duration.toSeconds(config.throughput.window),
    warmupSeconds: Duration.toSeconds(config.throughput.warmup),
    repeats,
    rounds: {
      backlogEvents: config.backlog,
      backlogAppend: "EventLog.append, 1,000 events per transaction, before any timing; then VACUUM ANALYZE event_log",
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
  }
}

const baseline = {
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
  handoff: "no baseline: absolute targets",
}

export const report = (figures: Figures): Report => {
  const { roundCases, handoff, asyncCommit } = figures
  const ratioAt = (batchSize: number, receivers: number) =>
    roundCases.find((c) => c.batchSize === batchSize && c.receivers === receivers)?.ratio ?? Number.NaN
  const latency = handoff.latencyMs
  return {
    conditions: conditions(figures),
    results: {
      rounds: roundCases,
      jobsInsert: figures.jobsInsert.result,
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
    baseline,
    targets: [
      atLeast("round throughput ours/raw >= 0.5 at batch 500, 1 receiver", ratioAt(500, 1), 0.5),
      atLeast("round throughput ours/raw >= 0.5 at batch 500, 10 receivers", ratioAt(500, 10), 0.5),
      atMost("handoff latency p95 <= 10 ms", latency.p95, 10),
      atMost("handoff latency p99 <= 25 ms", latency.p99, 25),
    ],
    table: table(figures),
  }
}

const table = ({
  roundCases,
  jobsInsert: { result: jobsInsert, median: insertMedian },
  handoff,
  asyncCommit,
  handoffConfig,
}: Figures) => {
  const latency = handoff.latencyMs
  return {
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
  }
}
