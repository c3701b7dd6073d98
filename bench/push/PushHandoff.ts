/**
 * Push end to end under a steady load (the `push_handoff` figure): from an event's
 * commit to (a) its `push.batch` jobs being claimable (the round's statement that inserted them
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
 * Pushes are counted from the push service's receipts: a `push.batch` job carries one event to up
 * to `push.batch_size` registrations and rewrites its args to what it has left, so its args do not
 * say who it sent to. A message is tied to the batch job of its event that was running when it
 * arrived (`attributeMessages`); per-job figures are per batch job, and the jobs' final states and
 * errors are read from the job table.
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
import * as CpuProfile from "../harness/CpuProfile.ts"
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
  /** `push.batch_size`: registrations per `push.batch` job. */
  readonly registrationsPerJob: number
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

/** The worker side as `bothy worker` composes push, under the trace recorder; a clean slate first. */
const startRun = (config: PushHandoffConfig, push: PushSettings) =>
  Effect.gen(function* () {
    const server = yield* BenchServer
    const { head, connectionsAtStart } = yield* PushSample.reset
    const trace = PushTrace.recorder()
    yield* PushSample.startWorker(
      server,
      push,
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
    return { base: head, connectionsAtStart, trace }
  })

/** Pending push jobs, the cursor's lag and what the benchmark's backends wait on, at `t` s since `t0`. */
const sampleAt = (sql: SqlClient.SqlClient, t0: number) =>
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

type Stamps = ProducerThread.Stamps

/** The production window: the producer thread's appends, timed, with the CPU of each side. */
const produce = (
  config: PushHandoffConfig,
  service: BenchPushService,
  run: { readonly total: number; readonly interval: number },
  stamps: Stamps,
) =>
  Effect.gen(function* () {
    const server = yield* BenchServer
    const sql = yield* SqlClient.SqlClient
    const { total, interval } = run
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
    const samples: Array<Sample> = []
    const sampler = yield* everySecond(t0, sampleAt(sql, t0), samples)

    const postmaster = CpuUsage.postmasterPid(server.dataDir)
    const cpu0 = CpuUsage.sample(postmaster)
    const service0 = yield* service.cpuMicros
    const loop = yield* EventLoopDelay.monitor
    const stopProfile = yield* CpuProfile.start(`push-handoff-${config.eventsPerSecond}`)
    const production = yield* Throughput.timed(
      Effect.map(thread.start(t0), (out) => {
        stamps.committedAt.set(out.committedAt)
        stamps.appendMs.set(out.appendMs)
        stamps.lateTick.set(out.lateTick)
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
    yield* stopProfile
    const cpu = CpuUsage.since(cpu0, CpuUsage.sample(postmaster))
    const serviceCores = ((yield* service.cpuMicros) - service0) / 1e6 / production.seconds
    return {
      t0,
      received0,
      rejected0,
      notified0,
      samples,
      sampler,
      production,
      producedAt,
      cpu,
      serviceCores,
      loopDelayMs: loop.read(),
      atProductionEnd: yield* sampleAt(sql, t0),
      receivedAtProductionEnd: service.received() - received0,
    }
  })
type Production = Effect.Success<ReturnType<typeof produce>>

/** Where each member sits: its space and its slot among the space's members. */
interface Place {
  readonly space: number
  readonly slot: number
}

/** Which message is which: event index by seq, and a message's key (event, member slot). */
const messageIndex = (
  config: PushHandoffConfig,
  audience: Audience,
  total: number,
  seqRows: ReadonlyArray<{ seq: bigint; i: number }>,
) => {
  const indexOfSeq = new Map(seqRows.map((r) => [Number(r.seq), r.i]))
  const bySubscription = new Map<number, Place>()
  audience.forEach((members, space) => {
    members.forEach((m, slot) => {
      bySubscription.set(m.subscription, { space, slot })
    })
  })
  /** The index of the run's event `seq`, or undefined for any other. */
  const eventOfSeq = (seq: number) => {
    const i = indexOfSeq.get(seq)
    return i === undefined || i < 0 || i >= total ? undefined : i
  }
  /** Message key of event i to a member, -1 when that member is not in the event's space. */
  const keyOf = (i: number, place: Place | undefined) =>
    place === undefined || place.space !== i % config.spaces ? -1 : i * config.membersPerSpace + place.slot
  return { eventOfSeq, bySubscription, keyOf }
}
type MessageIndex = ReturnType<typeof messageIndex>

/** (event, member slot) -> first arrival at the push service; the rest are duplicates or strays. */
const tallyArrivals = (service: BenchPushService, from: number, slots: number, index: MessageIndex) => {
  const arrivedAt = new Float64Array(slots).fill(Number.NaN)
  let duplicates = 0
  let unexpected = 0
  const { arrivals } = service
  for (let k = from; k < arrivals.at.length; k++) {
    const i = index.eventOfSeq(arrivals.seq[k]!)
    const key = i === undefined ? -1 : index.keyOf(i, index.bySubscription.get(arrivals.subscription[k]!))
    if (key < 0) {
      unexpected++
      continue
    }
    if (!Number.isNaN(arrivedAt[key]!)) duplicates++
    else arrivedAt[key] = arrivals.at[k]!
  }
  return { arrivedAt, duplicates, unexpected }
}

/** A message's batch job attempt: the attempt whose run covered its arrival. */
interface Carrier {
  readonly job: string
  readonly run: PushTrace.JobRun
}

/**
 * Ties each arrived message to the attempt of a `push.batch` job of its event that was running
 * when it arrived (a message arrives after its send began and before its answer, so within its
 * job's run). An event with one job and one attempt needs no timing; a message that several
 * attempts of its event's jobs cover, or none, is left untied and counted.
 */
const attributeMessages = (
  membersPerSpace: number,
  arrivedAt: Float64Array,
  jobs: ReadonlyArray<PushSample.JobRow>,
  trace: ReturnType<typeof PushTrace.recorder>,
  index: MessageIndex,
) => {
  const attemptsOfEvent = new Map<number, Array<Carrier>>()
  for (const job of jobs) {
    const i = index.eventOfSeq(Number(job.seq))
    if (i === undefined) continue
    const list = attemptsOfEvent.get(i) ?? []
    for (const run of trace.runs.get(job.id) ?? []) list.push({ job: job.id, run })
    attemptsOfEvent.set(i, list)
  }
  const carrierOf = new Array<Carrier | undefined>(arrivedAt.length)
  let untied = 0
  arrivedAt.forEach((at, key) => {
    if (Number.isNaN(at)) return
    const candidates = attemptsOfEvent.get(Math.floor(key / membersPerSpace)) ?? []
    const covering =
      candidates.length === 1 ? candidates : candidates.filter((c) => c.run.start <= at && at <= c.run.end)
    if (covering.length === 1) carrierOf[key] = covering[0]
    else untied++
  })
  return { carrierOf, untied, attemptsOfEvent }
}

/** The figures of each batch job of the measured events: its start after its round, its runs, the pushes tied to it. */
const perJobOf = (
  measuredEvents: ReadonlyArray<number>,
  attemptsOfEvent: ReadonlyMap<number, ReadonlyArray<Carrier>>,
  carrierOf: ReadonlyArray<Carrier | undefined>,
  roundEnd: (i: number) => number,
) => {
  const pushesOf = new Map<string, number>()
  for (const c of carrierOf) if (c !== undefined) pushesOf.set(c.job, (pushesOf.get(c.job) ?? 0) + 1)
  const jobs = new Map<string, { readonly event: number; start: number; attempts: number }>()
  const attempts = measuredEvents.flatMap((i) => (attemptsOfEvent.get(i) ?? []).map((c) => ({ ...c, event: i })))
  for (const c of attempts) {
    const job = jobs.get(c.job)
    if (job === undefined) jobs.set(c.job, { event: c.event, start: c.run.start, attempts: 1 })
    else {
      job.start = Math.min(job.start, c.run.start)
      job.attempts++
    }
  }
  return {
    note: "per push.batch job of the measured events (one event to up to push.batch_size registrations): pushesPerJob = messages the push service received that are tied to the job (see breakdownMs.note); roundEndToJobStart = its first attempt's start after its event's round committed; run, sendsPerRun and send (each message's OutboundSender.send) per attempt",
    jobs: jobs.size,
    pushesPerJob: distribution([...jobs.keys()].map((id) => pushesOf.get(id) ?? 0)),
    attemptsPerJob: distribution([...jobs.values()].map((j) => j.attempts)),
    roundEndToJobStart: distribution([...jobs.values()].map((j) => j.start - roundEnd(j.event))),
    run: distribution(attempts.map((c) => c.run.end - c.run.start)),
    sendsPerRun: distribution(attempts.map((c) => c.run.sends.length)),
    send: distribution(attempts.flatMap((c) => c.run.sends.map((x) => x.end - x.start))),
  }
}

/** Each event's round, from the spans, and the round's NOTIFY as the push service's listener heard it. */
const roundsOf = (
  trace: ReturnType<typeof PushTrace.recorder>,
  notified: ReadonlyArray<number>,
  total: number,
  index: MessageIndex,
) => {
  const roundOf = new Int32Array(total).fill(-1)
  trace.rounds.forEach((r, n) => {
    for (let seq = r.fromSeq; seq <= r.toSeq; seq++) {
      const i = index.eventOfSeq(Number(seq))
      if (i !== undefined) roundOf[i] = n
    }
  })
  // The k-th `push` NOTIFY on `jobs` is the k-th round's commit: rounds serialize on the cursor
  // row, each that made jobs notifies once, and nothing else notifies `push` in a run without retries.
  const notifyMapped = notified.length === trace.rounds.length
  return {
    notifyMapped,
    roundEnd: (i: number) => trace.rounds[roundOf[i]!]?.end ?? Number.NaN,
    roundStart: (i: number) => trace.rounds[roundOf[i]!]?.start ?? Number.NaN,
    roundNotified: (i: number) => (notifyMapped ? (notified[roundOf[i]!] ?? Number.NaN) : Number.NaN),
  }
}

const nan = (n: number | undefined) => (n === undefined || !Number.isFinite(n) ? Number.NaN : n)

export const measure = (
  config: PushHandoffConfig,
  world: { readonly push: PushSettings; readonly service: BenchPushService; readonly audience: Audience },
) =>
  Effect.gen(function* () {
    const server = yield* BenchServer
    const sql = yield* SqlClient.SqlClient
    const { service } = world
    const { base, connectionsAtStart, trace } = yield* startRun(config, world.push)

    const interval = 1000 / config.eventsPerSecond
    const warm = Math.round(config.warmupSeconds * config.eventsPerSecond)
    const total = warm + Math.round(config.seconds * config.eventsPerSecond)
    const stamps = ProducerThread.unstamped(total)
    const p = yield* produce(config, service, { total, interval }, stamps)

    // An append the producer saw fail made no event, so no message is owed for it.
    const appendsFailed = stamps.committedAt.reduce((n, at) => n + (Number.isNaN(at) ? 1 : 0), 0)
    const expected = (total - appendsFailed) * config.membersPerSpace
    const deadline = p.producedAt + config.drainSeconds * 1000
    while (service.received() - p.received0 < expected && performance.now() < deadline) yield* Effect.sleep("20 millis")
    // Anything beyond the expected (duplicates) that was already on its way.
    yield* Effect.sleep("100 millis")
    yield* Fiber.interrupt(p.sampler)
    const fdatasyncMsAfter = (yield* Conditions.storage(server.folder)).fdatasyncMs

    const seqRows = yield* sql<{ seq: bigint; i: number }>`
      SELECT seq, (payload->>'i')::int AS i FROM event_log WHERE seq > ${base}`
    const jobs = yield* PushSample.jobsOfRun
    return {
      ...figures(
        config,
        { service, trace, stamps, p, jobs, warm, total, interval, appendsFailed, expected },
        messageIndex(config, world.audience, total, seqRows),
      ),
      fdatasyncMsAfter,
      /** Client connections on the server as the run began (the benchmark's own pool and listener, and whatever a run before left). */
      connectionsAtStart,
    }
  }).pipe(Effect.scoped)

/** Everything a run measured, for its figures. */
interface Measured {
  readonly service: BenchPushService
  readonly trace: ReturnType<typeof PushTrace.recorder>
  readonly stamps: Stamps
  readonly p: Production
  readonly jobs: Effect.Success<typeof PushSample.jobsOfRun>
  readonly warm: number
  readonly total: number
  readonly interval: number
  readonly appendsFailed: number
  readonly expected: number
}

/** Exactly once, by (event, registration), from the push service's receipts; the jobs' ends beside it. */
const checkOf = (config: PushHandoffConfig, m: Measured, arrivals: ReturnType<typeof tallyArrivals>) => {
  const { arrivedAt, duplicates, unexpected } = arrivals
  // Owed: every member of the space of every event that committed.
  const owed = (key: number) => !Number.isNaN(m.stamps.committedAt[Math.floor(key / config.membersPerSpace)]!)
  const missing = arrivedAt.reduce((n, a, key) => n + (owed(key) && Number.isNaN(a) ? 1 : 0), 0)
  const rejections = m.service.rejections.slice(m.p.rejected0)
  return {
    passed: missing === 0 && duplicates === 0 && unexpected === 0 && rejections.length === 0,
    rule: "every (event, registration) message of every committed event arrived exactly once at the push service, with a valid VAPID token, and decrypted to an envelope naming its event",
    /** Appends that failed on the producer thread: no event, so no message owed (a producer fault, not push's). */
    appendsFailed: m.appendsFailed,
    expected: m.expected,
    arrived: m.expected - missing,
    missing,
    duplicates,
    unexpected,
    rejections: rejections.length,
    firstRejections: rejections.slice(0, 5),
    /** `push.batch` jobs by state when the last message had arrived (one job per event and push.batch_size registrations). */
    jobsByState: m.jobs.states,
    /** Batch jobs that recorded an error (a retry, or dead registrations named in the reason). */
    jobsWithErrors: m.jobs.withErrors,
    firstJobErrors: m.jobs.firstErrors,
  }
}

/** Pending push jobs and the cursor's lag over the measured window: flat or growing. */
const backlogOf = (config: PushHandoffConfig, m: Measured) => {
  const { p, warm, total, interval } = m
  const windowSamples = p.samples.filter((s) => s.t * 1000 >= warm * interval && s.t * 1000 <= (total - 1) * interval)
  // One job per event and push.batch_size registrations: the jobs offered per second.
  const jobsPerEvent = Math.ceil(config.membersPerSpace / config.registrationsPerJob)
  const limit = config.flatSlopeShare * config.eventsPerSecond * jobsPerEvent
  const pending = series(windowSamples, (s) => s.pendingJobs, limit)
  const lag = series(windowSamples, (s) => s.cursorLag, config.flatSlopeShare * config.eventsPerSecond)
  return {
    criterion: `flat = least-squares slope over the measured window's 1 s samples <= ${config.flatSlopeShare * 100}% of the offered rate (${limit} push.batch jobs/s for pending push jobs, ${jobsPerEvent} per event; ${config.flatSlopeShare * config.eventsPerSecond} events/s for the cursor lag)`,
    flat: pending.flat && lag.flat,
    pendingJobs: pending,
    cursorLag: lag,
    atProductionEnd: {
      pendingJobs: p.atProductionEnd.pendingJobs,
      cursorLag: p.atProductionEnd.cursorLag,
      notYetArrived: m.expected - p.receivedAtProductionEnd,
    },
    drainSeconds: round3((performance.now() - p.producedAt) / 1000),
    drainBoundSeconds: config.drainSeconds,
    samples: p.samples,
  }
}

/** The figures over the measured events (after the warm-up). */
const figures = (config: PushHandoffConfig, m: Measured, index: MessageIndex) => {
  const { p, trace, warm, total, interval } = m
  const { committedAt, appendMs, lateTick } = m.stamps
  const arrivals = tallyArrivals(m.service, p.received0, total * config.membersPerSpace, index)
  const { arrivedAt } = arrivals
  const check = checkOf(config, m, arrivals)
  const { passed } = check
  const r = roundsOf(trace, m.service.notified.slice(p.notified0), total, index)
  const tied = attributeMessages(config.membersPerSpace, arrivedAt, m.jobs.rows, trace, index)
  const carrier = (key: number) => tied.carrierOf[key]?.run
  const measuredEvents = Array.from({ length: total - warm }, (_, k) => warm + k).filter(
    (i) => !Number.isNaN(committedAt[i]!),
  )
  const measuredMessages = measuredEvents.flatMap((i) =>
    Array.from({ length: config.membersPerSpace }, (_, s) => i * config.membersPerSpace + s),
  )
  const eventOf = (key: number) => Math.floor(key / config.membersPerSpace)
  const perEvent = (f: (i: number) => number) => distribution(measuredEvents.map(f))
  const perMessage = (f: (key: number) => number) => distribution(measuredMessages.map(f))
  const perJob = perJobOf(measuredEvents, tied.attemptsOfEvent, tied.carrierOf, r.roundEnd)
  const measuredAttempts = measuredEvents.flatMap((i) => (tied.attemptsOfEvent.get(i) ?? []).map((c) => c.run))
  const windowStart = p.t0 + warm * interval
  const windowEnd = p.t0 + (total - 1) * interval
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
    /** Messages the push service received in the measured window, per second. */
    pushesPerSecond: round3((arrivalsInWindow / (windowEnd - windowStart)) * 1000),
    // A run that failed the check has no figure.
    jobClaimableMs: passed ? perEvent((i) => r.roundEnd(i) - committedAt[i]!) : undefined,
    /** (a) as the database saw it: to the round's `pg_notify('jobs', 'push')` reaching a listener on the push service's thread. */
    jobClaimableAtNotifyMs:
      passed && r.notifyMapped
        ? perEvent((i) => r.roundNotified(i) - committedAt[i]!)
        : `unmapped (${m.service.notified.length - p.notified0} notifications, ${trace.rounds.length} rounds)`,
    arrivedMs: passed ? perMessage((key) => arrivedAt[key]! - committedAt[eventOf(key)]!) : undefined,
    backlog: backlogOf(config, m),
    breakdownMs: {
      note: "per measured message: commitToRoundEnd (the event's, i.e. (a)) + roundEndToJobStart + jobStartToArrival = (b), where a message's job is the attempt of a push.batch job of its event whose run covered its arrival (messagesUntied: those no single attempt covered, left out); jobStartToSend and build are per message sent, over every attempt of the measured events' jobs (a batch's sends are not tied to their registrations); build is the share of jobStartToSend spent building the request (encryption, headers)",
      messagesUntied: tied.untied,
      commitToRoundStart: perEvent((i) => r.roundStart(i) - committedAt[i]!),
      roundDuration: perEvent((i) => r.roundEnd(i) - r.roundStart(i)),
      roundEndToJobStart: perMessage((key) => nan(carrier(key)?.start) - r.roundEnd(eventOf(key))),
      jobStartToSend: distribution(measuredAttempts.flatMap((a) => a.sends.map((x) => x.start - a.start))),
      build: distribution(measuredAttempts.flatMap((a) => a.builds.map((x) => x.end - x.start))),
      jobStartToArrival: perMessage((key) => arrivedAt[key]! - nan(carrier(key)?.start)),
      arrivalToJobEnd: perMessage((key) => nan(carrier(key)?.end) - arrivedAt[key]!),
    },
    perJob,
    rounds: {
      processed: trace.rounds.length,
      eventsPerRound: distribution(trace.rounds.map((x) => x.events)),
      /** `push.batch` jobs each round made. */
      jobsPerRound: distribution(trace.rounds.map((x) => x.jobs)),
      durationMs: distribution(trace.rounds.map((x) => x.end - x.start)),
    },
    producer: {
      appendMs: distribution(measuredEvents.map((i) => appendMs[i]!)),
      lateTickMs: distribution(measuredEvents.map((i) => lateTick[i]!)),
      producedSeconds: round3(p.production.seconds),
    },
    machineBusy: p.production.machineBusy,
    /** The worker side's event loop (this process's main thread) while producing. */
    eventLoopDelayMs: p.loopDelayMs,
    /** While producing: this process (producer thread, consumer, job worker; the push service's thread taken out), the push service's thread, the server; in cores. */
    cpu: {
      workerCores: round3(p.cpu.clientCores - p.serviceCores),
      pushServiceCores: round3(p.serviceCores),
      serverCores: p.cpu.serverCores,
      machineBusy: p.cpu.machineBusy,
    },
  }
}

export type PushHandoffResult = Effect.Success<ReturnType<typeof measure>>
