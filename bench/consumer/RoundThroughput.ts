/**
 * Part 1 of `consumer`, round throughput: a backlog (appended in big transactions before the clock
 * starts) drained by `Consumer.makeRound` rounds back to back until caught up, against raw rounds
 * doing the same reads and writes (`ConsumerBaselines.drain`). Every run starts from the same
 * state (no jobs, cursor before the backlog) and is checked afterwards: one job per (event,
 * receiver), cursor at the head, or the run has no figure.
 *
 * Ours is traced with `RoundTrace` and the raw rounds time their statements, so each case also
 * says where a round's time goes, phase by phase, on both sides.
 */
import { Console, Effect, Schema } from "effect"
import { SqlClient } from "effect/sql"
import type { Client } from "pg"
import * as Consumer from "../../src/consumer/Consumer.ts"
import { EventLog } from "../../src/log/EventLog.ts"
import { round0, round3 } from "../harness/Figures.ts"
import { jobPerReceiver } from "../harness/Handoff.ts"
import * as Rotation from "../harness/Rotation.ts"
import * as RoundTrace from "../harness/RoundTrace.ts"
import { eventAt } from "../harness/SampleEvent.ts"
import * as Throughput from "../harness/Throughput.ts"
import * as ConsumerBaselines from "./ConsumerBaselines.ts"
import { consumer, type OursServices, rawFanOut } from "./ConsumerSample.ts"

export const batchSizes = [100, 500, 1000] as const
export const receiverCounts = [1, 10] as const
const implementations = ["ours", "raw"] as const

/** A run left jobs or cursor in a state the implementation promises it cannot; its figure is void. */
export class DrainCheckFailed extends Schema.TaggedError<DrainCheckFailed>()("DrainCheckFailed", {
  implementation: Schema.String,
  detail: Schema.String,
}) {
  override get message() {
    return `after a drain by ${this.implementation}, jobs and cursor are not what it promises: ${this.detail}`
  }
}

export interface DrainRun {
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

export interface RoundCase {
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

interface Backlog {
  /** The head before the backlog: where every run's cursor starts. */
  readonly before: bigint
  readonly head: bigint
  readonly events: number
}

/** Appends the backlog once (rounds only read it), 1,000 events per transaction. */
const appendBacklog = (ours: OursServices, events: number) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const log = yield* EventLog
    yield* sql`INSERT INTO event_consumer_cursors (name, last_seq) SELECT ${consumer}, value FROM event_seq`
    const before = (yield* log.head).seq
    for (let i = 0; i < events; i += 1000) {
      yield* log.append(Array.from({ length: Math.min(1000, events - i) }, (_, j) => eventAt(i + j)))
    }
    const head = before + BigInt(events)
    yield* sql.unsafe("VACUUM ANALYZE event_log")
    yield* Console.log(`backlog: ${events} events appended (seqs ${before + 1n}..${head})`)
    return { before, head, events } satisfies Backlog
  }).pipe(Effect.provide(ours))

const reset = (backlog: Backlog) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    yield* sql`TRUNCATE jobs`
    yield* sql`UPDATE event_consumer_cursors SET last_seq = ${backlog.before} WHERE name = ${consumer}`
    yield* sql.unsafe("VACUUM event_consumer_cursors") // updated once per round; start each run unbloated
    yield* sql.unsafe("CHECKPOINT") // no run pays for the previous run's dirty pages
  })

const verifyDrain = (backlog: Backlog, implementation: string, receivers: number) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const [row] = yield* sql<{ jobs: bigint; keys: bigint; cursor: bigint }>`
      SELECT count(*) AS jobs, count(DISTINCT unique_key) AS keys,
             (SELECT last_seq FROM event_consumer_cursors WHERE name = ${consumer}) AS cursor
      FROM jobs`
    const expected = BigInt(backlog.events * receivers)
    if (row?.jobs !== expected || row.keys !== expected || row.cursor !== backlog.head) {
      return yield* new DrainCheckFailed({
        implementation,
        detail: `expected ${expected} jobs with distinct keys and cursor ${backlog.head}, found ${String(row?.jobs)} jobs, ${String(row?.keys)} keys, cursor ${String(row?.cursor)}`,
      })
    }
    return true
  })

/** Ours: `Consumer.makeRound` rounds back to back until caught up, each split into phases. */
const drainOurs = (ours: OursServices, batchSize: number, receivers: number) => {
  const recorder = RoundTrace.recorder()
  return Effect.gen(function* () {
    const round = yield* Consumer.makeRound({
      name: consumer,
      batchSize,
      onLoss: () => Effect.void,
      fanOut: (events) => Effect.succeed(events.flatMap((e) => jobPerReceiver(e.seq, receivers))),
    })
    return yield* RoundTrace.drain(round, recorder)
  }).pipe(Effect.provide(ours), Effect.withTracer(recorder.tracer))
}

const drainOnce = (
  input: { readonly ours: OursServices; readonly client: Client; readonly backlog: Backlog },
  implementation: (typeof implementations)[number],
  batchSize: number,
  receivers: number,
) =>
  Effect.gen(function* () {
    yield* reset(input.backlog)
    const drain: Effect.Effect<ConsumerBaselines.Drained, unknown> =
      implementation === "ours"
        ? drainOurs(input.ours, batchSize, receivers)
        : ConsumerBaselines.drain(input.client, consumer, input.backlog.before, batchSize, rawFanOut(receivers))
    const r = yield* Throughput.timed(drain)
    const verified = yield* verifyDrain(input.backlog, implementation, receivers)
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

/** Every case (batch size × receivers), ours and raw in turn, `repeats` times. */
export const roundThroughput = (input: {
  readonly ours: OursServices
  readonly client: Client
  readonly backlogEvents: number
  readonly repeats: number
}) =>
  Effect.gen(function* () {
    const backlog = yield* appendBacklog(input.ours, input.backlogEvents)
    const cases: Array<RoundCase> = []
    for (const receivers of receiverCounts) {
      for (const batchSize of batchSizes) {
        const runs = yield* Rotation.rotate(implementations, input.repeats, (implementation, repeat) =>
          drainOnce({ ...input, backlog }, implementation, batchSize, receivers).pipe(
            Effect.tap((r) =>
              Console.log(
                `rounds: batch ${batchSize}, ${receivers} receivers, ${implementation} #${repeat}: ${round0(r.eventsPerSecond)} events/s, ${round0(r.jobsPerSecond)} jobs/s (client ${r.clientCores} cores, machine ${Math.round(r.machineBusy * 100)}% busy)`,
              ),
            ),
            Effect.map((r): DrainRun => ({ repeat, ...r })),
          ),
        )
        cases.push(roundCase(batchSize, receivers, runs))
      }
    }
    return cases
  })

const roundCase = (
  batchSize: number,
  receivers: number,
  runs: Record<"ours" | "raw", ReadonlyArray<DrainRun>>,
): RoundCase => {
  const median = (impl: "ours" | "raw") => Throughput.median(runs[impl].map((r) => r.eventsPerSecond))
  return {
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
    runs: { ours: runs.ours.map(roundDrainRun), raw: runs.raw.map(roundDrainRun) },
  }
}

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
