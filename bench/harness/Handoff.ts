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
import { type Distribution, distribution } from "./Distribution.ts"
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
  /** With `post_commit`: the sequencer's options (default: `Sequencer.layer()`'s). */
  readonly sequencer?: Sequencer.SequencerOptions
}

/** The consumer did not catch up with the producer in time: the run has no figure. */
export class HandoffStalled extends Schema.TaggedError<HandoffStalled>()("HandoffStalled", {
  detail: Schema.String,
}) {
  override get message() {
    return `handoff run did not complete: ${this.detail}`
  }
}

/** Every stamp of one run, by event index (the tick; in counter mode also seq - base - 1). */
const stampsFor = (config: HandoffConfig, base: bigint) => {
  const warm = Math.round(config.warmupSeconds * config.eventsPerSecond)
  const total = warm + Math.round(config.seconds * config.eventsPerSecond)
  const postCommit = config.sequencing === "post_commit"
  // post_commit: seq -> tick, from the events' payloads as the fan-out sees them.
  const tickOf = new Map<bigint, number>()
  return {
    base,
    warm,
    total,
    postCommit,
    lastSeq: base + BigInt(total),
    tickOf,
    indexOf: (seq: bigint) => (postCommit ? (tickOf.get(seq) ?? -1) : Number(seq - base) - 1),
    lateTick: new Float64Array(total).fill(Number.NaN), // by tick: sent - due
    appendMs: new Float64Array(total).fill(Number.NaN), // by seq: sent to commit acknowledged
    committedAt: new Float64Array(total).fill(Number.NaN),
    notifiedAt: new Float64Array(total).fill(Number.NaN),
    jobAt: new Float64Array(total).fill(Number.NaN),
    roundOf: new Int32Array(total).fill(-1),
    outcomes: { Processed: 0, CaughtUp: 0, Locked: 0, Failed: 0 },
    returnedAt: [] as Array<number>,
    notifications: 0,
    connects: 0,
    recorder: RoundTrace.recorder(),
  }
}
type Stamps = ReturnType<typeof stampsFor>

/** A fresh cursor at the head and no jobs; the head is the run's base seq. */
const resetCursor = (name: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    yield* sql`TRUNCATE jobs`
    yield* sql`DELETE FROM event_consumer_cursors WHERE name = ${name}`
    yield* sql`INSERT INTO event_consumer_cursors (name, last_seq) SELECT ${name}, value FROM event_seq`
    const [row] = yield* sql<{ base: bigint }>`SELECT last_seq AS base FROM event_consumer_cursors WHERE name = ${name}`
    yield* sql.unsafe("CHECKPOINT")
    return row!.base
  })

/** Stamps each notification on `event_log`; subscribed before the consumer, so it sees each first. */
const listen = (stamps: Stamps, stream: NotificationStream["Service"]) =>
  Effect.gen(function* () {
    const connected = yield* Deferred.make<void>()
    yield* stream.subscribe("event_log", (wake) =>
      Effect.suspend(() => {
        if (wake._tag === "Connected") {
          stamps.connects++
          return Deferred.succeed(connected, undefined).pipe(Effect.asVoid)
        }
        if (stamps.notifications < stamps.total) stamps.notifiedAt[stamps.notifications] = performance.now()
        stamps.notifications++
        return Effect.void
      }),
    )
    yield* Deferred.await(connected)
  })

/** The consumer under test; `onRound` stamps the events of each round and opens `allDone` at the last. */
const startConsumer = (
  config: HandoffConfig,
  name: string,
  stamps: Stamps,
  signals: { readonly firstRound: Deferred.Deferred<void>; readonly allDone: Deferred.Deferred<void> },
) =>
  Layer.build(
    Consumer.layer({
      name,
      batchSize: config.batchSize,
      pollInterval: config.pollInterval,
      onLoss: () => Effect.void,
      fanOut: (events) =>
        Effect.sync(() => {
          if (stamps.postCommit) for (const e of events) stamps.tickOf.set(e.seq, (e.payload as { tick: number }).tick)
          return events.flatMap((e) => config.fanOut(e.seq, config.receivers))
        }),
      onRound: (outcome) =>
        Effect.suspend(() => {
          const now = performance.now()
          stamps.outcomes[outcome._tag]++
          if (outcome._tag !== "Processed") return Deferred.succeed(signals.firstRound, undefined).pipe(Effect.asVoid)
          const trace = stamps.recorder.lastEnded()
          const index = trace === undefined ? -1 : stamps.recorder.rounds.lastIndexOf(trace)
          if (index >= 0) stamps.returnedAt[index] = now
          for (let seq = outcome.fromSeq; seq <= outcome.toSeq; seq++) {
            const i = stamps.indexOf(seq)
            if (i >= 0 && i < stamps.total) {
              stamps.jobAt[i] = now
              stamps.roundOf[i] = index
            }
          }
          return outcome.toSeq >= stamps.lastSeq
            ? Deferred.succeed(signals.allDone, undefined).pipe(Effect.asVoid)
            : Effect.void
        }),
    }),
  ).pipe(Effect.withTracer(stamps.recorder.tracer))

/** The open-loop producer on connections of its own, stamping each commit as it returns. */
const produce = (config: HandoffConfig, stamps: Stamps) =>
  Effect.gen(function* () {
    const server = yield* BenchServer
    if (stamps.postCommit) {
      yield* Layer.build(
        Sequencer.layer(config.sequencer).pipe(
          Layer.provide(NotificationStream.layer()),
          Layer.provide(server.pool(2)),
        ),
      )
    }
    const producer = yield* Layer.build(
      EventLog.layerFor(config.sequencing ?? "counter").pipe(
        Layer.provideMerge(server.pool(config.producerConnections)),
      ),
    )
    const log = Context.get(producer, EventLog)
    const eventOf = (tick: number) =>
      stamps.postCommit ? { ...config.event, payload: { ...(config.event.payload as object), tick } } : config.event
    const t0 = performance.now() + 10
    const interval = 1000 / config.eventsPerSecond
    return yield* Throughput.timed(
      Throughput.steady({ total: stamps.total, interval, t0, lateTick: stamps.lateTick }, (tick, sent) =>
        log.append([eventOf(tick)]).pipe(
          Effect.tap((appended) =>
            Effect.sync(() => {
              const j = appended._tag === "Sequenced" ? Number(appended.lastSeq - stamps.base) - 1 : tick
              stamps.committedAt[j] = performance.now()
              stamps.appendMs[j] = stamps.committedAt[j] - sent
            }),
          ),
          Effect.asVoid,
          Effect.orDie,
        ),
      ),
    )
  })

export const measure = (config: HandoffConfig) =>
  Effect.gen(function* () {
    const server = yield* BenchServer
    const name = "bench_handoff"
    const stamps = stampsFor(config, yield* resetCursor(name))
    const signals = { firstRound: yield* Deferred.make<void>(), allDone: yield* Deferred.make<void>() }

    const pool = yield* Layer.build(server.pool(config.consumerConnections, { session: config.consumerSession }))
    const streamContext = yield* Layer.build(NotificationStream.layer()).pipe(Effect.provide(pool))
    yield* listen(stamps, Context.get(streamContext, NotificationStream))
    const services = yield* Layer.build(Layer.mergeAll(EventLog.layer, Jobs.layer)).pipe(Effect.provide(pool))
    yield* startConsumer(config, name, stamps, signals).pipe(
      Effect.provide(Context.merge(Context.merge(pool, streamContext), services)),
    )
    yield* Deferred.await(signals.firstRound) // the start-up round has run: the consumer is idle and listening

    const production = yield* produce(config, stamps)
    yield* Deferred.await(signals.allDone).pipe(
      Effect.timeoutOrElse({
        duration: "60 seconds",
        orElse: () =>
          Effect.fail(new HandoffStalled({ detail: `no job for seq ${stamps.lastSeq} 60 s after the last append` })),
      }),
    )
    // The disk right after the run: a round's commit waits for one WAL flush, often two.
    const fdatasyncMsAfter = (yield* Conditions.storage(server.folder)).fdatasyncMs
    return figures(stamps, production, fdatasyncMsAfter)
  }).pipe(Effect.scoped)

/** The figures over the measured events (after the warm-up). */
const figures = (
  stamps: Stamps,
  production: { readonly seconds: number; readonly clientCores: number; readonly machineBusy: number },
  fdatasyncMsAfter: Conditions.Storage["fdatasyncMs"],
) => {
  const { warm, total, committedAt, notifiedAt, jobAt, roundOf, recorder } = stamps
  const measured = Array.from({ length: total - warm }, (_, k) => warm + k)
  const of = (f: (i: number) => number): Distribution => distribution(measured.map(f))
  const roundStart = (i: number) => recorder.rounds[roundOf[i]!]?.start ?? Number.NaN
  const roundEnd = (i: number) => recorder.rounds[roundOf[i]!]?.end ?? Number.NaN
  const firstCommit = committedAt[warm]!
  const lastCommit = committedAt[total - 1]!
  // Every counted notification was the k-th after the (only) connect; a reconnect voids the mapping.
  const notifyMapped = !stamps.postCommit && stamps.connects === 1 && stamps.notifications === total

  const measuredRounds = [...new Set(measured.map((i) => roundOf[i]!))].filter((r) => r >= 0)
  const phases = measuredRounds
    .map((r) => RoundTrace.phases(recorder.rounds[r]!, stamps.returnedAt[r] ?? Number.NaN))
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
    fdatasyncMsAfter,
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
      appendMs: of((i) => stamps.appendMs[i]!),
      /** How late the producer fiber forked each append against its schedule. */
      lateTickMs: of((i) => stamps.lateTick[i]!),
    },
    rounds: {
      outcomes: stamps.outcomes,
      carryingMeasuredEvents: measuredRounds.length,
      eventsPerRound: distribution(eventsPerRound),
      phasesMs: Object.fromEntries(RoundTrace.phaseNames.map((k) => [k, distribution(phases.map((p) => p[k]))])),
    },
  }
}

export type HandoffResult = Effect.Success<ReturnType<typeof measure>>

/** One job per event and receiver, the fan-out the handoff runs of `consumer`, `handoff` and `push` share. */
export const jobPerReceiver = (seq: bigint, receivers: number): Array<FanOutJob> =>
  Array.from({ length: receivers }, (_, r) => ({
    seq,
    receiver: `r${r}`,
    kind: "bench.deliver",
    args: { seq: seq.toString(), receiver: `r${r}` },
  }))
