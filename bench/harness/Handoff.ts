/**
 * Handoff latency: how long an event waits from its commit to the commit of its job, with a
 * consumer running for real (`Consumer.layer`, woken by `NotificationStream`) while a producer
 * appends at a steady rate, one event per transaction.
 *
 *   producer fiber: a tick every 1/rate s ──fork──> append ──returns──> committedAt[seq]
 *   listener:       k-th NOTIFY on event_log ─────────────────────────> notifiedAt[base + k]
 *   consumer:       round span starts ... round returns Processed [from, to] ──> jobAt[from..to]
 *
 * The producer is open-loop: it forks each append at its due time (t₀ + i/rate) and never waits
 * for the previous one, so a slow commit delays that event only and cannot thin out the load
 * (no coordinated omission). All stamps are `performance.now()` in this one process.
 *
 * Where the time goes comes from two places that need no change to src/:
 *   - the k-th notification on `event_log` belongs to seq base + k: appends serialize on the
 *     counter row until they commit, so NOTIFYs queue in seq order, one per transaction;
 *   - `RoundTrace` splits each round into phases from the spans the consumer already makes.
 *
 * `consumerSession` sets PostgreSQL settings on the consumer's connections only (startup
 * parameters), for what-if runs such as asynchronous commit of rounds; producers stay durable.
 *
 * With `sequencing: "post_commit"` the producer appends through `EventLog.layerPostCommit` and a
 * `Sequencer` (its own two connections) numbers the appends; the latency then includes that hop.
 * An event's seq is not known at its commit, so each carries its tick in the payload and the
 * fan-out maps seqs back to ticks; NOTIFYs come one per batch, so the notify split is unmapped.
 */
import { Context, Deferred, type Duration, Effect, Layer, Schema } from "effect"
import { SqlClient } from "effect/sql"
import * as Consumer from "../../src/consumer/Consumer.ts"
import type { FanOutJob } from "../../src/consumer/ConsumerRound.ts"
import { Jobs } from "../../src/jobs/Jobs.ts"
import type { NewEvent } from "../../src/log/Event.ts"
import { EventLog } from "../../src/log/EventLog.ts"
import * as Sequencer from "../../src/log/Sequencer.ts"
import type { LogSequencing } from "../../src/platform/BothyConfig.ts"
import { NotificationStream } from "../../src/platform/NotificationStream.ts"
import { BenchServer } from "./BenchServer.ts"
import * as Conditions from "./Conditions.ts"
import { round3 } from "./Figures.ts"
import * as RoundTrace from "./RoundTrace.ts"
import * as Throughput from "./Throughput.ts"

export interface HandoffConfig {
  readonly eventsPerSecond: number
  /** Measured events are those due in this window, after the warm-up. */
  readonly seconds: number
  readonly warmupSeconds: number
  readonly batchSize: number
  readonly pollInterval: Duration.Input
  readonly receivers: number
  readonly producerConnections: number
  readonly consumerConnections: number
  /** Session settings for the consumer's connections only; empty for the real figure. */
  readonly consumerSession: Readonly<Record<string, string>>
  readonly event: NewEvent
  /** The jobs for one event and `receivers` receivers. */
  readonly fanOut: (seq: bigint, receivers: number) => ReadonlyArray<FanOutJob>
  /** Default `counter`. */
  readonly sequencing?: LogSequencing
}

/** The consumer did not catch up with the producer in time: the run has no figure. */
export class HandoffStalled extends Schema.TaggedError<HandoffStalled>()("HandoffStalled", {
  detail: Schema.String,
}) {
  override get message() {
    return `handoff run did not complete: ${this.detail}`
  }
}

/** p50/p95/p99/max of a sample, nearest rank, in the sample's unit rounded to µs. */
export interface Distribution {
  readonly count: number
  readonly p50: number
  readonly p95: number
  readonly p99: number
  readonly max: number
  readonly mean: number
}

export const distribution = (values: ReadonlyArray<number>): Distribution => {
  const sorted = values.filter((v) => !Number.isNaN(v)).sort((a, b) => a - b)
  const at = (q: number) => round3(sorted[Math.max(0, Math.ceil(q * sorted.length) - 1)] ?? Number.NaN)
  const sum = sorted.reduce((s, v) => s + v, 0)
  return {
    count: sorted.length,
    p50: at(0.5),
    p95: at(0.95),
    p99: at(0.99),
    max: at(1),
    mean: round3(sorted.length === 0 ? Number.NaN : sum / sorted.length),
  }
}

// ---- one run ---------------------------------------------------------------------------------

export const measure = (config: HandoffConfig) =>
  Effect.gen(function* () {
    const server = yield* BenchServer
    const sql = yield* SqlClient.SqlClient
    const name = "bench_handoff"
    yield* sql`TRUNCATE jobs`
    yield* sql`DELETE FROM event_consumer_cursors WHERE name = ${name}`
    yield* sql`INSERT INTO event_consumer_cursors (name, last_seq) SELECT ${name}, value FROM event_seq`
    const [row] = yield* sql<{ base: bigint }>`SELECT last_seq AS base FROM event_consumer_cursors WHERE name = ${name}`
    const base = row!.base
    yield* sql.unsafe("CHECKPOINT")

    const interval = 1000 / config.eventsPerSecond
    const warm = Math.round(config.warmupSeconds * config.eventsPerSecond)
    const total = warm + Math.round(config.seconds * config.eventsPerSecond)
    const lateTick = new Float64Array(total).fill(Number.NaN) // by tick: sent - due
    const appendMs = new Float64Array(total).fill(Number.NaN) // by seq: sent to commit acknowledged
    const committedAt = new Float64Array(total).fill(Number.NaN)
    const notifiedAt = new Float64Array(total).fill(Number.NaN)
    const jobAt = new Float64Array(total).fill(Number.NaN)
    const roundOf = new Int32Array(total).fill(-1)
    const outcomes = { Processed: 0, CaughtUp: 0, Locked: 0, Failed: 0 }
    const returnedAt: Array<number> = []
    let notifications = 0
    let connects = 0

    const recorder = RoundTrace.recorder()
    const firstRound = yield* Deferred.make<void>()
    const allDone = yield* Deferred.make<void>()
    const lastSeq = base + BigInt(total)
    const postCommit = config.sequencing === "post_commit"
    // post_commit: seq -> tick, from the events' payloads as the fan-out sees them.
    const tickOf = new Map<bigint, number>()
    const indexOf = (seq: bigint) => (postCommit ? (tickOf.get(seq) ?? -1) : Number(seq - base) - 1)

    const pool = yield* Layer.build(server.pool(config.consumerConnections, { session: config.consumerSession }))
    const streamContext = yield* Layer.build(NotificationStream.layer()).pipe(Effect.provide(pool))
    const connected = yield* Deferred.make<void>()
    // Subscribed before the consumer, so it sees each notification before the consumer is poked.
    yield* Context.get(streamContext, NotificationStream).subscribe("event_log", (wake) =>
      Effect.suspend(() => {
        if (wake._tag === "Connected") {
          connects++
          return Deferred.succeed(connected, undefined).pipe(Effect.asVoid)
        }
        if (notifications < total) notifiedAt[notifications] = performance.now()
        notifications++
        return Effect.void
      }),
    )
    yield* Deferred.await(connected)

    const services = yield* Layer.build(Layer.mergeAll(EventLog.layer, Jobs.layer)).pipe(Effect.provide(pool))
    yield* Layer.build(
      Consumer.layer({
        name,
        batchSize: config.batchSize,
        pollInterval: config.pollInterval,
        onLoss: () => Effect.void,
        fanOut: (events) =>
          Effect.sync(() => {
            if (postCommit) for (const e of events) tickOf.set(e.seq, (e.payload as { tick: number }).tick)
            return events.flatMap((e) => config.fanOut(e.seq, config.receivers))
          }),
        onRound: (outcome) =>
          Effect.suspend(() => {
            const now = performance.now()
            outcomes[outcome._tag]++
            if (outcome._tag !== "Processed") return Deferred.succeed(firstRound, undefined).pipe(Effect.asVoid)
            const trace = recorder.lastEnded()
            const index = trace === undefined ? -1 : recorder.rounds.lastIndexOf(trace)
            if (index >= 0) returnedAt[index] = now
            for (let seq = outcome.fromSeq; seq <= outcome.toSeq; seq++) {
              const i = indexOf(seq)
              if (i >= 0 && i < total) {
                jobAt[i] = now
                roundOf[i] = index
              }
            }
            return outcome.toSeq >= lastSeq ? Deferred.succeed(allDone, undefined).pipe(Effect.asVoid) : Effect.void
          }),
      }),
    ).pipe(
      Effect.provide(Context.merge(Context.merge(pool, streamContext), services)),
      Effect.withTracer(recorder.tracer),
    )
    yield* Deferred.await(firstRound) // the start-up round has run: the consumer is idle and listening

    if (postCommit) yield* Layer.build(Sequencer.layer().pipe(Layer.provide(server.pool(2))))
    const producer = yield* Layer.build(
      EventLog.layerFor(config.sequencing ?? "counter").pipe(
        Layer.provideMerge(server.pool(config.producerConnections)),
      ),
    )
    const log = Context.get(producer, EventLog)
    const eventOf = (tick: number) =>
      postCommit ? { ...config.event, payload: { ...(config.event.payload as object), tick } } : config.event
    const t0 = performance.now() + 10
    const production = yield* Throughput.timed(
      Throughput.steady({ total, interval, t0, lateTick }, (tick, sent) =>
        log.append([eventOf(tick)]).pipe(
          Effect.tap((appended) =>
            Effect.sync(() => {
              const j = appended._tag === "Sequenced" ? Number(appended.lastSeq - base) - 1 : tick
              committedAt[j] = performance.now()
              appendMs[j] = committedAt[j] - sent
            }),
          ),
          Effect.asVoid,
          Effect.orDie,
        ),
      ),
    )
    yield* Deferred.await(allDone).pipe(
      Effect.timeoutOrElse({
        duration: "60 seconds",
        orElse: () =>
          Effect.fail(new HandoffStalled({ detail: `no job for seq ${lastSeq} 60 s after the last append` })),
      }),
    )

    // ---- figures over the measured events (after the warm-up) ----
    const measured = Array.from({ length: total - warm }, (_, k) => warm + k)
    const of = (f: (i: number) => number) => distribution(measured.map(f))
    const roundStart = (i: number) => recorder.rounds[roundOf[i]!]?.start ?? Number.NaN
    const roundEnd = (i: number) => recorder.rounds[roundOf[i]!]?.end ?? Number.NaN
    const firstCommit = committedAt[warm]!
    const lastCommit = committedAt[total - 1]!
    // Every counted notification was the k-th after the (only) connect; a reconnect voids the mapping.
    const notifyMapped = !postCommit && connects === 1 && notifications === total

    const measuredRounds = [...new Set(measured.map((i) => roundOf[i]!))].filter((r) => r >= 0)
    const phases = measuredRounds
      .map((r) => RoundTrace.phases(recorder.rounds[r]!, returnedAt[r] ?? Number.NaN))
      .filter((p) => p !== undefined)
    const perRound = new Map<number, number>()
    for (const i of measured) perRound.set(roundOf[i]!, (perRound.get(roundOf[i]!) ?? 0) + 1)
    const eventsPerRound = measuredRounds.map((r) => perRound.get(r) ?? 0)

    return {
      events: measured.length,
      achievedEventsPerSecond: round3(((measured.length - 1) / (lastCommit - firstCommit)) * 1000),
      producedSeconds: round3(production.seconds),
      clientCores: production.clientCores,
      machineBusy: production.machineBusy,
      // The disk right after the run: a round's commit waits for one WAL flush, often two.
      fdatasyncMsAfter: (yield* Conditions.storage(server.folder)).fdatasyncMs,
      latencyMs: of((i) => jobAt[i]! - committedAt[i]!),
      breakdownMs: {
        note:
          "per event; commitToRoundStart + roundDuration + roundEndToOnRound = latency. A round that started " +
          "before the producer saw its commit acknowledged gives a negative commitToRoundStart.",
        commitToNotify: notifyMapped ? of((i) => notifiedAt[i]! - committedAt[i]!) : "unmapped (listener reconnected)",
        notifyToRoundStart: notifyMapped ? of((i) => roundStart(i) - notifiedAt[i]!) : "unmapped",
        commitToRoundStart: of((i) => roundStart(i) - committedAt[i]!),
        roundDuration: of((i) => roundEnd(i) - roundStart(i)),
        roundEndToOnRound: of((i) => jobAt[i]! - roundEnd(i)),
      },
      producer: {
        /** From the tick to the append returning, including any wait for a free producer connection. */
        appendMs: of((i) => appendMs[i]!),
        /** How late the producer fiber forked each append against its schedule. */
        lateTickMs: of((i) => lateTick[i]!),
      },
      rounds: {
        outcomes,
        carryingMeasuredEvents: measuredRounds.length,
        eventsPerRound: distribution(eventsPerRound),
        phasesMs: Object.fromEntries(RoundTrace.phaseNames.map((k) => [k, distribution(phases.map((p) => p[k]))])),
      },
    }
  }).pipe(Effect.scoped)

export type HandoffResult = Effect.Success<ReturnType<typeof measure>>
