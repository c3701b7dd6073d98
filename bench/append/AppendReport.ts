/**
 * What `append` reports: conditions, the baselines, the targets (ours against the naive counter,
 * post_commit against plain inserts and its commit-to-readable latency) and the table.
 */
import { Duration } from "effect"
import type { Distribution } from "../harness/Distribution.ts"
import { packageVersion, round0, round3, times } from "../harness/Figures.ts"
import type { Report, Target } from "../harness/Report.ts"
import * as Rotation from "../harness/Rotation.ts"
import * as Throughput from "../harness/Throughput.ts"
import { batchSizes, type Case, implementations, producerCounts } from "./AppendCase.ts"
import { payloadBytes } from "./AppendSample.ts"
import * as WakeLatency from "./WakeLatency.ts"

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
    "ours, naive, plain and inPlace write to event_log itself (partitioned by day and hour, primary key (seq, occurred_at)); inPlace with provisional negative seqs that the sequencer numbers where they lie; postCommit writes one event_log_pending row per transaction, which the sequencer moves into event_log",
  sequencer:
    "postCommit and inPlace only: Sequencer.layer({ placement }) defaults (poll 5 ms, 1,000 appends (pending) or events (in place) per batch) on a pool of 2 in this process; the commit-to-readable reader (LISTEN event_log, then read after its cursor) on another pool of 2",
  betweenRuns:
    "TRUNCATE event_log, event_log_pending; event_seq.value = 0; the sequencer lease freed; VACUUM event_seq; CHECKPOINT",
  order: "each repeat runs ours, postCommit, inPlace, naive and plain in a rotating order",
  figure: "median events/s over the repeats, each counting events committed inside the window after the warm-up",
})

const baseline = {
  ours: "EventLog.appendAfter(Effect.void, () => batch): BEGIN; one statement (counter UPDATE, INSERT from jsonb_to_recordset, pg_notify); COMMIT. Includes event validation and the trace_parent from the current span.",
  postCommit:
    "post_commit (EventLog.layerPostCommit): BEGIN; INSERT INTO event_log_pending (one row, the batch as jsonb); COMMIT; a Sequencer moves the appends into event_log, numbered (one statement per batch: DELETE, INSERT, counter UPDATE, NOTIFY). Counted when the producer's commit returns; the run is checked after the sequencer has numbered everything.",
  inPlace:
    "post_commit sequenced in place (EventLog.layerPostCommitInPlace): BEGIN; INSERT INTO event_log (the batch, seq -(append id * 2^20 + position)); COMMIT; a Sequencer numbers waiting events where they lie (one statement per batch: UPDATE of seq, epoch and occurred_at, counter UPDATE, NOTIFY). Counted and checked as postCommit.",
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
    "in place ev/s",
    "baseline a ev/s",
    "baseline b ev/s",
    "ours/a",
    "ours/b",
    "post_commit/b",
    "in place/b",
    "in place/post_commit",
    "readable p50/p95 ms",
    "in place readable p50/p95 ms",
  ],
  rows: cases.map((c) => [
    c.case,
    String(c.producers),
    String(c.eventsPerTxn),
    String(round0(c.eventsPerSecond.ours)),
    String(round0(c.eventsPerSecond.postCommit)),
    String(round0(c.eventsPerSecond.inPlace)),
    String(round0(c.eventsPerSecond.naive)),
    String(round0(c.eventsPerSecond.plain)),
    times(c.ratio.oursOverNaive),
    times(c.ratio.oursOverPlain),
    times(c.ratio.postCommitOverPlain),
    times(c.ratio.inPlaceOverPlain),
    times(c.ratio.inPlaceOverPostCommit),
    `${c.commitToReadableMs.postCommit.p50.toFixed(2)} / ${c.commitToReadableMs.postCommit.p95.toFixed(2)}`,
    `${c.commitToReadableMs.inPlace.p50.toFixed(2)} / ${c.commitToReadableMs.inPlace.p95.toFixed(2)}`,
  ]),
})

export const report = (
  cases: ReadonlyArray<Case>,
  settings: Throughput.Settings,
  wake: Record<WakeLatency.WakeMode, ReadonlyArray<Distribution & { readonly repeat: number }>>,
): Report => {
  const single = (producers: number) => cases.find((c) => c.producers === producers && c.eventsPerTxn === 1)
  const ratioAt8 = (eventsPerTxn: number) =>
    cases.find((c) => c.producers === 8 && c.eventsPerTxn === eventsPerTxn)?.ratio.oursOverNaive ?? Number.NaN

  return {
    conditions: conditions(settings),
    results: {
      wakeLatency: {
        description: `post_commit (pending), one producer at ${WakeLatency.wakeRate} events/s for 3 x BENCH_SECONDS: commit-to-readable with the sequencer woken by appends (woken) and left to its 5 ms poll (polled), ms; medians over the repeats, then each repeat`,
        p50: Rotation.mapOf(WakeLatency.wakeModes, (m) => Throughput.median(wake[m].map((d) => d.p50))),
        p95: Rotation.mapOf(WakeLatency.wakeModes, (m) => Throughput.median(wake[m].map((d) => d.p95))),
        runs: wake,
      },
      cases: cases.map((c) => ({
        ...c,
        eventsPerSecond: Rotation.mapOf(implementations, (impl) => round0(c.eventsPerSecond[impl])),
        ratio: {
          oursOverNaive: round3(c.ratio.oursOverNaive),
          oursOverPlain: round3(c.ratio.oursOverPlain),
          postCommitOverPlain: round3(c.ratio.postCommitOverPlain),
          postCommitOverOurs: round3(c.ratio.postCommitOverOurs),
          inPlaceOverPlain: round3(c.ratio.inPlaceOverPlain),
          inPlaceOverPostCommit: round3(c.ratio.inPlaceOverPostCommit),
        },
        runs: Rotation.mapOf(implementations, (impl) =>
          c.runs[impl].map((r) => ({ ...r, eventsPerSecond: round0(r.eventsPerSecond), seconds: round3(r.seconds) })),
        ),
      })),
    },
    baseline,
    targets: [
      target("EventLog.append >= 1.0x baseline (a) at 8 producers, 1 event/txn", ratioAt8(1)),
      target("EventLog.append >= 1.0x baseline (a) at 8 producers, 10 events/txn", ratioAt8(10)),
      ...(["postCommit", "inPlace"] as const).flatMap((impl) => {
        const which = impl === "postCommit" ? "post_commit (kept)" : "post_commit in place (not kept)"
        const ratio = single(16)?.ratio[impl === "postCommit" ? "postCommitOverPlain" : "inPlaceOverPlain"]
        const p95 = single(8)?.commitToReadableMs[impl].p95
        return [
          {
            name: `${which} >= 0.8x plain inserts (b) at 16 producers, 1 event/txn`,
            value: round3(ratio ?? Number.NaN),
            target: 0.8,
            met: (ratio ?? 0) >= 0.8,
          },
          {
            name: `${which} commit-to-readable p95 <= 10 ms at 8 producers, 1 event/txn`,
            value: round3(p95 ?? Number.NaN),
            target: 10,
            met: (p95 ?? Number.POSITIVE_INFINITY) <= 10,
          },
        ]
      }),
    ],
    table: table(cases),
  }
}
