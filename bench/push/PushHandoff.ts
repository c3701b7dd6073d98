/**
 * Push end to end under a steady load (the `push_handoff` figure): from an event's
 * commit to (a) its `push.deliver` jobs being claimable (the round's statement that inserted them
 * committed) and (b) each message arriving, decrypted, at the push service, with the whole path
 * running for real in this process while a producer thread appends at a steady rate, one event per
 * transaction.
 *
 *   producer thread: a tick every 1/rate s ──> EventLog.append ──returns──> committedAt[i]
 *   worker side:     PushFanOut.layer (one-statement round: events, audience, registrations, jobs)
 *                    ─> JobWorker (queue push, PushDelivery: read, permission, encrypt, VAPID, POST)
 *   push service:    its own thread; checks VAPID, decrypts, reads the envelope's seq ──> arrivedAt
 *   sampler:         every second, pending push jobs and the push cursor's lag
 *
 * `S` spaces (`bench-k`) with `M` members each, every member with `push.deliver` on its space and
 * one registration; event i is in space `bench-(i mod S)`, so it reaches exactly M registrations.
 * After the run every message must have arrived exactly once, by (event, registration), and
 * decrypted; a run that fails the check has no figure (`check.passed` false, latencies omitted).
 *
 * The producer is open-loop (`ProducerThread`): each append is forked at its due time whatever the
 * delivery path does, so a slow path cannot thin out the load. `PushTrace` splits each message's
 * time into phases from the spans the consumer and worker already make.
 */
import { Duration, Effect, Fiber, Schema } from "effect"
import { SqlClient } from "effect/sql"
import type { PushSettings } from "../../src/push/PushConfig.ts"
import * as PushFanOut from "../../src/push/PushFanOut.ts"
import { everySecond, series } from "../harness/BacklogTrend.ts"
import { BenchServer } from "../harness/BenchServer.ts"
import * as Conditions from "../harness/Conditions.ts"
import * as CpuUsage from "../harness/CpuUsage.ts"
import { distribution } from "../harness/Distribution.ts"
import { round3 } from "../harness/Figures.ts"
import * as ProducerThread from "../harness/ProducerThread.ts"
import * as Throughput from "../harness/Throughput.ts"
import type { BenchPushService } from "./BenchPushService.ts"
import * as EventLoopDelay from "./EventLoopDelay.ts"
import * as PushSample from "./PushSample.ts"
import * as PushTrace from "./PushTrace.ts"

export interface PushHandoffConfig {
  readonly eventsPerSecond: number
  /** Measured events are those due in this window, after the warm-up. */
  readonly seconds: number
  readonly warmupSeconds: number
  readonly spaces: number
  readonly membersPerSpace: number
  readonly batchSize: number
  readonly pollInterval: Duration.Input
  /** The `push` consumer's cooldown (`consumer.cooldown`, which `bothy worker` gives it). */
  readonly cooldownMs: number
  /** The job worker's concurrency on queue `push` (`push.max_in_flight`). */
  readonly concurrency: number
  readonly workerConnections: number
  readonly producerConnections: number
  /** How long to wait, after the last append, for every message to arrive. */
  readonly drainSeconds: number
  /** Growth of a backlog per second, as a share of the offered rate, still counted as flat. */
  readonly flatSlopeShare: number
}

/** The producer thread never reported its appends: the run has no figure. */
export class ProducerStalled extends Schema.TaggedError<ProducerStalled>()("ProducerStalled", {
  detail: Schema.String,
}) {
  override get message() {
    return `push handoff run did not complete: ${this.detail}`
  }
}

interface Sample {
  /** Seconds since the production start. */
  readonly t: number
  readonly pendingJobs: number
  readonly cursorLag: number
  /** What the benchmark's busy backends wait on (`wait_event_type:wait_event` x count), producers included. */
  readonly waits: string
}

/** By space index, the push-service subscriptions of its members. */
export type Audience = ReadonlyArray<ReadonlyArray<PushSample.Registered>>

export const measure = (
  config: PushHandoffConfig,
  world: { readonly push: PushSettings; readonly service: BenchPushService; readonly audience: Audience },
) =>
  Effect.gen(function* () {
    const server = yield* BenchServer
    const sql = yield* SqlClient.SqlClient
    const { service, audience } = world
    const { head: base, connectionsAtStart } = yield* PushSample.reset

    const interval = 1000 / config.eventsPerSecond
    const warm = Math.round(config.warmupSeconds * config.eventsPerSecond)
    const total = warm + Math.round(config.seconds * config.eventsPerSecond)
    const slots = total * config.membersPerSpace
    const committedAt = new Float64Array(total).fill(Number.NaN)
    const appendMs = new Float64Array(total).fill(Number.NaN)
    const lateTick = new Float64Array(total).fill(Number.NaN)

    const trace = PushTrace.recorder()
    yield* PushSample.startWorker(
      server,
      world.push,
      {
        connections: config.workerConnections,
        batchSize: config.batchSize,
        pollInterval: config.pollInterval,
        cooldownMs: config.cooldownMs,
        concurrency: config.concurrency,
        signEach: false,
      },
      trace.roundsEnded,
      trace.tracer,
    )

    const samples: Array<Sample> = []
    const sampleNow = (t0: number) =>
      sql<Omit<Sample, "t">>`
        SELECT (SELECT count(*) FROM jobs WHERE queue = ${PushFanOut.queue}
                  AND state IN ('available', 'scheduled', 'running', 'retryable'))::int AS "pendingJobs",
               ((SELECT value FROM event_seq)
                 - (SELECT last_seq FROM event_consumer_cursors WHERE name = ${PushFanOut.name}))::int AS "cursorLag",
               coalesce((SELECT string_agg(w || ' x' || n, ', ' ORDER BY n DESC) FROM (
                 SELECT coalesce(wait_event_type || ':' || wait_event, 'cpu') AS w, count(*) AS n FROM pg_stat_activity
                 WHERE state = 'active' AND application_name LIKE 'bothy-bench%' AND pid <> pg_backend_pid()
                 GROUP BY 1) AS a), '') AS waits`.pipe(
        Effect.map(([s]) => ({ t: round3((performance.now() - t0) / 1000), ...s! })),
      )

    const thread = yield* ProducerThread.run({
      ...ProducerThread.connectionOf(server),
      connections: config.producerConnections,
      total,
      interval,
      subscriptions: config.spaces,
    })
    yield* thread.ready
    const received0 = service.received()
    const rejected0 = service.rejections.length
    const notified0 = service.notified.length
    const t0 = performance.now() + 10
    const sampler = yield* everySecond(t0, sampleNow(t0), samples)

    const postmaster = CpuUsage.postmasterPid(server.dataDir)
    const cpu0 = CpuUsage.sample(postmaster)
    const service0 = yield* service.cpuMicros
    const loop = yield* EventLoopDelay.monitor
    const production = yield* Throughput.timed(
      Effect.map(thread.start(t0), (out) => {
        committedAt.set(out.committedAt)
        appendMs.set(out.appendMs)
        lateTick.set(out.lateTick)
      }),
    ).pipe(
      // A producer thread that died (its appends failed) never answers: the run ends instead of hanging.
      Effect.timeoutOrElse({
        duration: Duration.seconds(total / config.eventsPerSecond + config.drainSeconds),
        orElse: () =>
          Effect.fail(new ProducerStalled({ detail: `no answer from the producer thread (${total} appends)` })),
      }),
    )
    const producedAt = performance.now()
    const cpu = CpuUsage.since(cpu0, CpuUsage.sample(postmaster))
    const serviceCores = ((yield* service.cpuMicros) - service0) / 1e6 / production.seconds
    const loopDelayMs = loop.read()
    const atProductionEnd = yield* sampleNow(t0)
    const receivedAtProductionEnd = service.received() - received0

    // An append the producer saw fail made no event, so no message is owed for it.
    const appendsFailed = committedAt.reduce((n, at) => n + (Number.isNaN(at) ? 1 : 0), 0)
    const expected = (total - appendsFailed) * config.membersPerSpace
    const deadline = producedAt + config.drainSeconds * 1000
    while (service.received() - received0 < expected && performance.now() < deadline) yield* Effect.sleep("20 millis")
    // Anything beyond the expected (duplicates) that was already on its way.
    yield* Effect.sleep("100 millis")
    yield* Fiber.interrupt(sampler)
    const fdatasyncMsAfter = (yield* Conditions.storage(server.folder)).fdatasyncMs

    // ---- which message is which ----
    const seqRows = yield* sql<{ seq: bigint; i: number }>`
      SELECT seq, (payload->>'i')::int AS i FROM event_log WHERE seq > ${base}`
    const indexOfSeq = new Map(seqRows.map((r) => [Number(r.seq), r.i]))
    const seqOf = new Float64Array(total).fill(Number.NaN)
    for (const r of seqRows) if (r.i >= 0 && r.i < total) seqOf[r.i] = Number(r.seq)
    // Where each member sits: its space and its slot among the space's members.
    const bySubscription = new Map<number, { readonly space: number; readonly slot: number }>()
    const byRegistration = new Map<string, { readonly space: number; readonly slot: number }>()
    audience.forEach((members, space) => {
      members.forEach((m, slot) => {
        bySubscription.set(m.subscription, { space, slot })
        byRegistration.set(m.registration, { space, slot })
      })
    })
    /** Message key of event i to a member, -1 when that member is not in the event's space. */
    const keyOf = (i: number, place: { readonly space: number; readonly slot: number } | undefined) =>
      place === undefined || place.space !== i % config.spaces ? -1 : i * config.membersPerSpace + place.slot

    // (event, member slot) -> arrival; counted once, the rest are duplicates or strays.
    const arrivedAt = new Float64Array(slots).fill(Number.NaN)
    let duplicates = 0
    let unexpected = 0
    const { arrivals } = service
    for (let k = received0; k < arrivals.at.length; k++) {
      const i = indexOfSeq.get(arrivals.seq[k]!)
      const key = i === undefined || i >= total ? -1 : keyOf(i, bySubscription.get(arrivals.subscription[k]!))
      if (key < 0) {
        unexpected++
        continue
      }
      if (!Number.isNaN(arrivedAt[key]!)) duplicates++
      else arrivedAt[key] = arrivals.at[k]!
    }
    // Owed: every member of the space of every event that committed.
    const owed = (key: number) => !Number.isNaN(committedAt[Math.floor(key / config.membersPerSpace)]!)
    const missing = arrivedAt.reduce((n, a, key) => n + (owed(key) && Number.isNaN(a) ? 1 : 0), 0)
    const rejections = service.rejections.slice(rejected0)
    const jobs = yield* PushSample.jobsOfRun
    const passed = missing === 0 && duplicates === 0 && unexpected === 0 && rejections.length === 0
    const check = {
      passed,
      rule: "every (event, registration) message of every committed event arrived exactly once at the push service, with a valid VAPID token, and decrypted to an envelope naming its event",
      /** Appends that failed on the producer thread: no event, so no message owed (a producer fault, not push's). */
      appendsFailed,
      expected,
      arrived: expected - missing,
      missing,
      duplicates,
      unexpected,
      rejections: rejections.length,
      firstRejections: rejections.slice(0, 5),
      jobsByState: jobs.states,
    }

    // ---- figures over the measured events (after the warm-up) ----
    const roundOf = new Int32Array(total).fill(-1)
    trace.rounds.forEach((r, n) => {
      for (let seq = r.fromSeq; seq <= r.toSeq; seq++) {
        const i = indexOfSeq.get(Number(seq))
        if (i !== undefined && i >= 0 && i < total) roundOf[i] = n
      }
    })
    const roundEnd = (i: number) => trace.rounds[roundOf[i]!]?.end ?? Number.NaN
    // The k-th `push` NOTIFY on `jobs` is the k-th round's commit: rounds serialize on the cursor
    // row, each that made jobs notifies once, and nothing else notifies `push` in a run without retries.
    const notified = service.notified.slice(notified0)
    const notifyMapped = notified.length === trace.rounds.length
    const roundNotified = (i: number) => (notifyMapped ? (notified[roundOf[i]!] ?? Number.NaN) : Number.NaN)
    const roundStart = (i: number) => trace.rounds[roundOf[i]!]?.start ?? Number.NaN
    const runOf = new Array<PushTrace.JobRun | undefined>(slots)
    for (const job of jobs.rows) {
      const i = indexOfSeq.get(Number(job.seq))
      const key = i === undefined || i >= total ? -1 : keyOf(i, byRegistration.get(job.registration))
      if (key >= 0) runOf[key] = trace.runs.get(job.id)
    }
    const measuredEvents = Array.from({ length: total - warm }, (_, k) => warm + k).filter(
      (i) => !Number.isNaN(committedAt[i]!),
    )
    const measuredMessages = measuredEvents.flatMap((i) =>
      Array.from({ length: config.membersPerSpace }, (_, s) => i * config.membersPerSpace + s),
    )
    const eventOf = (key: number) => Math.floor(key / config.membersPerSpace)
    const perEvent = (f: (i: number) => number) => distribution(measuredEvents.map(f))
    const perMessage = (f: (key: number) => number) => distribution(measuredMessages.map(f))
    const nan = (n: number | undefined) => (n === undefined || !Number.isFinite(n) ? Number.NaN : n)

    const windowSamples = samples.filter((s) => s.t * 1000 >= warm * interval && s.t * 1000 <= (total - 1) * interval)
    const limit = config.flatSlopeShare * config.eventsPerSecond * config.membersPerSpace
    const pending = series(windowSamples, (s) => s.pendingJobs, limit)
    const lag = series(windowSamples, (s) => s.cursorLag, config.flatSlopeShare * config.eventsPerSecond)
    const windowStart = t0 + warm * interval
    const windowEnd = t0 + (total - 1) * interval
    const arrivalsInWindow = Array.from(arrivedAt).filter((a) => a >= windowStart && a <= windowEnd).length

    return {
      check,
      events: measuredEvents.length,
      messages: measuredMessages.length,
      achievedEventsPerSecond: round3(
        ((measuredEvents.length - 1) /
          (committedAt[measuredEvents.at(-1) ?? 0]! - committedAt[measuredEvents[0] ?? 0]!)) *
          1000,
      ),
      pushesPerSecond: round3((arrivalsInWindow / (windowEnd - windowStart)) * 1000),
      // A run that failed the check has no figure.
      jobClaimableMs: passed ? perEvent((i) => roundEnd(i) - committedAt[i]!) : undefined,
      /** (a) as the database saw it: to the round's `pg_notify('jobs', 'push')` reaching a listener on the push service's thread. */
      jobClaimableAtNotifyMs:
        passed && notifyMapped
          ? perEvent((i) => roundNotified(i) - committedAt[i]!)
          : `unmapped (${notified.length} notifications, ${trace.rounds.length} rounds)`,
      arrivedMs: passed ? perMessage((key) => arrivedAt[key]! - committedAt[eventOf(key)]!) : undefined,
      backlog: {
        criterion: `flat = least-squares slope over the measured window's 1 s samples <= ${config.flatSlopeShare * 100}% of the offered rate (${limit} jobs/s for pending push jobs, ${config.flatSlopeShare * config.eventsPerSecond} events/s for the cursor lag)`,
        flat: pending.flat && lag.flat,
        pendingJobs: pending,
        cursorLag: lag,
        atProductionEnd: {
          pendingJobs: atProductionEnd.pendingJobs,
          cursorLag: atProductionEnd.cursorLag,
          notYetArrived: expected - receivedAtProductionEnd,
        },
        drainSeconds: round3((performance.now() - producedAt) / 1000),
        drainBoundSeconds: config.drainSeconds,
        samples,
      },
      breakdownMs: {
        note: "per measured message: commitToRoundEnd (the event's, i.e. (a)) + roundEndToJobStart + jobStartToSend + sendToArrival = (b); build is the share of jobStartToSend spent in PushRequest.build (encryption, headers)",
        commitToRoundStart: perEvent((i) => roundStart(i) - committedAt[i]!),
        roundDuration: perEvent((i) => roundEnd(i) - roundStart(i)),
        roundEndToJobStart: perMessage((key) => nan(runOf[key]?.start) - roundEnd(eventOf(key))),
        jobStartToSend: perMessage((key) => nan(runOf[key]?.send?.start) - nan(runOf[key]?.start)),
        build: perMessage((key) => nan(runOf[key]?.build?.end) - nan(runOf[key]?.build?.start)),
        sendToArrival: perMessage((key) => arrivedAt[key]! - nan(runOf[key]?.send?.start)),
        arrivalToAnswered: perMessage((key) => nan(runOf[key]?.send?.end) - arrivedAt[key]!),
        jobRun: perMessage((key) => nan(runOf[key]?.end) - nan(runOf[key]?.start)),
      },
      rounds: {
        processed: trace.rounds.length,
        eventsPerRound: distribution(trace.rounds.map((r) => r.events)),
        durationMs: distribution(trace.rounds.map((r) => r.end - r.start)),
      },
      producer: {
        appendMs: distribution(measuredEvents.map((i) => appendMs[i]!)),
        lateTickMs: distribution(measuredEvents.map((i) => lateTick[i]!)),
        producedSeconds: round3(production.seconds),
      },
      machineBusy: production.machineBusy,
      /** The worker side's event loop (this process's main thread) while producing. */
      eventLoopDelayMs: loopDelayMs,
      /** While producing: this process (producer thread, consumer, job worker; the push service's thread taken out), the push service's thread, the server; in cores. */
      cpu: {
        workerCores: round3(cpu.clientCores - serviceCores),
        pushServiceCores: round3(serviceCores),
        serverCores: cpu.serverCores,
        machineBusy: cpu.machineBusy,
      },
      fdatasyncMsAfter,
      /** Client connections on the server as the run began (the benchmark's own pool and listener, and whatever a run before left). */
      connectionsAtStart,
    }
  }).pipe(Effect.scoped)

export type PushHandoffResult = Effect.Success<ReturnType<typeof measure>>
