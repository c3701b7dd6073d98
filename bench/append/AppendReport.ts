/**
 * What `append` reports: conditions, the baselines, the targets (ours against the naive counter,
 * post_commit against plain inserts and its commit-to-readable latency) and the table.
 */
import { Duration } from "effect"
import { packageVersion, round0, round3, times } from "../harness/Figures.ts"
import type { Report, Target } from "../harness/Report.ts"
import * as Rotation from "../harness/Rotation.ts"
import type * as Throughput from "../harness/Throughput.ts"
import { batchSizes, type Case, implementations, producerCounts } from "./AppendCase.ts"
import { payloadBytes } from "./AppendSample.ts"

const target = (name: string, value: number): Target => ({ name, value: round3(value), target: 1.0, met: value >= 1.0 })

const conditions = (settings: Throughput.Settings) => ({
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
})

const baseline = {
  ours: "EventLog.appendAfter(Effect.void, () => batch): BEGIN; one statement (counter UPDATE, INSERT from jsonb_to_recordset, pg_notify); COMMIT. Includes event validation and the trace_parent from the current span.",
  postCommit:
    "the same through EventLog.layerPostCommit: BEGIN; INSERT INTO event_log_pending (one row, the batch as jsonb); COMMIT; a Sequencer numbers the appends into event_log (one statement per batch, NOTIFY per batch). Counted when the producer's commit returns; the run is checked after the sequencer has numbered everything.",
  naive:
    "(a) naive counter, separate round trips: BEGIN; UPDATE event_seq SET value = value + n RETURNING value, epoch; INSERT INTO event_log … VALUES (n rows); COMMIT. No NOTIFY.",
  plain:
    "(b) no counter: BEGIN; the same INSERT INTO event_log; COMMIT, seq from a client-side counter unique per producer (p+1, p+1+P, …), epoch 1; event_seq is never touched. No NOTIFY.",
}

const table = (cases: ReadonlyArray<Case>) => ({
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
    String(round0(c.eventsPerSecond.ours)),
    String(round0(c.eventsPerSecond.postCommit)),
    String(round0(c.eventsPerSecond.naive)),
    String(round0(c.eventsPerSecond.plain)),
    times(c.ratio.oursOverNaive),
    times(c.ratio.oursOverPlain),
    times(c.ratio.postCommitOverPlain),
    times(c.ratio.postCommitOverOurs),
    `${c.commitToReadableMs.p50.toFixed(2)} / ${c.commitToReadableMs.p95.toFixed(2)}`,
  ]),
})

export const report = (cases: ReadonlyArray<Case>, settings: Throughput.Settings): Report => {
  const single = (producers: number) => cases.find((c) => c.producers === producers && c.eventsPerTxn === 1)
  const ratioAt8 = (eventsPerTxn: number) =>
    cases.find((c) => c.producers === 8 && c.eventsPerTxn === eventsPerTxn)?.ratio.oursOverNaive ?? Number.NaN

  return {
    conditions: conditions(settings),
    results: cases.map((c) => ({
      ...c,
      eventsPerSecond: Rotation.mapOf(implementations, (impl) => round0(c.eventsPerSecond[impl])),
      ratio: {
        oursOverNaive: round3(c.ratio.oursOverNaive),
        oursOverPlain: round3(c.ratio.oursOverPlain),
        postCommitOverPlain: round3(c.ratio.postCommitOverPlain),
        postCommitOverOurs: round3(c.ratio.postCommitOverOurs),
      },
      runs: Rotation.mapOf(implementations, (impl) =>
        c.runs[impl].map((r) => ({ ...r, eventsPerSecond: round0(r.eventsPerSecond), seconds: round3(r.seconds) })),
      ),
    })),
    baseline,
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
    table: table(cases),
  }
}
