/**
 * Webhooks end to end: from an event's commit to its request arriving at a local receiver, with
 * the whole delivery path running for real in this process while a producer appends at a steady
 * rate, one event per transaction.
 *
 *   producer fiber:  a tick every 1/rate s ──fork──> EventLog.append ──returns──> committedAt[i]
 *   worker side:     WebhookFanOut.layer (round: deliveries + a drain job per subscription
 *                    without a live drainer) ─> JobWorker (queue webhooks, WebhookDrainer kind:
 *                    acquire the slot, then take, sign, POST, record per delivery) ─> WebhookReceiver
 *   receiver thread: request for event i (payload.i in the envelope's data) ──> arrivedAt[i]
 *   sampler:         every second, pending deliveries and event_log head − webhooks cursor
 *
 * `S` subscriptions, subscription k covering the one space `bench-k` with no type filter, each with
 * its own receiver path `/s{k}`; event i goes to space `bench-(i mod S)`, so every event matches
 * exactly one subscription and each gets rate/S events per second. The owner holds
 * `webhook_out.deliver` on every space, so nothing is suppressed.
 *
 * The producer is open-loop, as in `Handoff.ts`: each append is forked at its due time (t₀ + i/rate)
 * without waiting for the previous one, so a slow delivery path cannot thin out the load. All
 * stamps are `performance.now()` of the main thread (the threads' converted to it); `DeliveryTrace` splits each event's latency
 * into phases from the spans the consumer and worker already make.
 *
 * Producer, worker side, receiver and PostgreSQL share the machine, as a small deployment would;
 * the producer (`ProducerThread`, with `producerThread`) and the receiver (`ReceiverThread`) each
 * run on a thread of their own, so that the worker side's CPU can be counted without them.
 */
import { Context, Duration, Effect, Fiber, Layer, Metric, Option, Redacted } from "effect"
import { SqlClient } from "effect/sql"
import * as PermissionGrants from "../../src/authz/PermissionGrants.ts"
import { webhookDeliver } from "../../src/authz/Permissions.ts"
import * as ConsumerMetrics from "../../src/consumer/ConsumerMetrics.ts"
import { Jobs } from "../../src/jobs/Jobs.ts"
import * as JobWorker from "../../src/jobs/JobWorker.ts"
import { EventLog } from "../../src/log/EventLog.ts"
import * as Observability from "../../src/ops/Observability.ts"
import * as Tracing from "../../src/ops/Tracing.ts"
import { NotificationStream } from "../../src/platform/NotificationStream.ts"
import * as WebhookDrainer from "../../src/webhooks/drain/WebhookDrainer.ts"
import { WebhookSubscriptions } from "../../src/webhooks/subscriptions/WebhookSubscriptions.ts"
import { WebhookConfig, type WebhookSettings } from "../../src/webhooks/WebhookConfig.ts"
import * as WebhookFanOut from "../../src/webhooks/WebhookFanOut.ts"
import { everySecond, series } from "../harness/BacklogTrend.ts"
import { BenchServer } from "../harness/BenchServer.ts"
import * as Conditions from "../harness/Conditions.ts"
import * as CpuProfile from "../harness/CpuProfile.ts"
import * as CpuUsage from "../harness/CpuUsage.ts"
import * as DeliveryTrace from "../harness/DeliveryTrace.ts"
import { type Distribution, distribution } from "../harness/Distribution.ts"
import * as ProducerThread from "../harness/ProducerThread.ts"
import * as ReceiverThread from "../harness/ReceiverThread.ts"
import * as Throughput from "../harness/Throughput.ts"
import { owner, spaceOf } from "../harness/WebhookSample.ts"
import type * as TelemetrySink from "./TelemetrySink.ts"

export interface EndToEndConfig {
  readonly eventsPerSecond: number
  /** Measured events are those due in this window, after the warm-up. */
  readonly seconds: number
  readonly warmupSeconds: number
  readonly subscriptions: number
  readonly batchSize: number
  readonly pollInterval: Duration.Input
  /** `Consumer.ConsumerOptions.cooldown` of the `webhooks` consumer. */
  readonly cooldownMs: number
  /** `WebhookFanOut` creates no job for a subscription whose slot a live drainer holds. */
  readonly skipHeld: boolean
  /** The job worker's concurrency on queue `webhooks`. */
  readonly concurrency: number
  /** Pool of the worker side (consumer, job worker, deliveries); the LISTEN connection is extra. */
  readonly workerConnections: number
  readonly producerConnections: number
  /** The producer on a worker thread of its own (its own event loop and pool), as a host app apart from the worker. */
  readonly producerThread: boolean
  /** How long to wait, after the last append, for every request to arrive. */
  readonly drainSeconds: number
  /** Delivered rows of earlier events in the delivery tables before the run, as a running installation has. */
  readonly historyDeliveries: number
  /** Growth of a backlog per second, as a share of the offered rate, still counted as flat. */
  readonly flatSlopeShare: number
  readonly webhookSettings: WebhookSettings
  /**
   * The cost of telemetry. Absent: the worker side runs under `DeliveryTrace`'s
   * recorder, for the phase breakdown. `off`: Effect's own tracer and no metrics endpoint, as
   * `bothy worker` runs with no OTLP endpoint and `metrics.address` off. `on`: as `bothy worker`
   * with both: `Tracing.layer` exporting over OTLP to `sink`, and `Observability.layer` (the
   * database gauges and `/metrics` on `metricsPort`) scraped by `sink` every `scrapeEveryMs`.
   * Either arm has no breakdown (no recorder).
   */
  readonly telemetry?: TelemetryArm
  /** Runs as the production window opens, after the set-up: a counter reset, say. */
  readonly atProductionStart?: Effect.Effect<void, never, SqlClient.SqlClient>
}

export type TelemetryArm =
  | { readonly on: false }
  | {
      readonly on: true
      readonly sink: Effect.Success<typeof TelemetrySink.start>
      readonly metricsPort: number
      readonly scrapeEveryMs: number
    }

interface Sample {
  /** Seconds since the production start. */
  readonly t: number
  readonly pendingDeliveries: number
  /** Subscriptions whose drain slot a job holds. */
  readonly heldSlots: number
  readonly cursorLag: number
  readonly runnableJobs: number
  /** Worker-side backends waiting on a lock (row locks: a round and drainers letting go of a slot); producers excluded. */
  readonly lockWaiters: number
}

const round3 = (n: number) => Math.round(n * 1000) / 1000

// ---- one run ---------------------------------------------------------------------------------

/** A clean slate: no subscriptions, deliveries or jobs; the consumer caught up with the log. */
const resetSlate = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`TRUNCATE webhook_subscriptions CASCADE`
  yield* sql`TRUNCATE jobs`
  yield* sql`
    UPDATE event_consumer_cursors SET last_seq = (SELECT value FROM event_seq)
    WHERE name = ${WebhookFanOut.name}`
  yield* sql.unsafe("VACUUM event_consumer_cursors, webhook_subscriptions, jobs")
  yield* sql.unsafe("CHECKPOINT")
})

type Tally = ReceiverThread.Tally
type Receiver = Effect.Success<ReturnType<typeof ReceiverThread.start>>

/** The subscriptions, one per space and receiver path, and the history a running installation has. */
const createSubscriptions = (config: EndToEndConfig, receiver: Pick<Receiver, "url">) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    // Subscriptions through the public service, as a host app creates them.
    const webhooks = yield* Layer.build(
      WebhookSubscriptions.layer.pipe(
        Layer.provide(Layer.merge(WebhookConfig.layerWith(config.webhookSettings), EventLog.layer)),
      ),
    )
    for (let k = 0; k < config.subscriptions; k++) {
      yield* PermissionGrants.grant(owner, webhookDeliver, spaceOf(k))
      yield* Context.get(webhooks, WebhookSubscriptions).create({
        owner,
        url: receiver.url(`/s${k}`),
        eventTypes: [],
        scope: [spaceOf(k)],
      })
    }
    // History, as a running installation has it: delivered rows of earlier events (the delivery
    // tables keep them; nothing reads them back), so that statements are planned against tables of
    // their working size and statistics rather than against the empty tables of a fresh install.
    if (config.historyDeliveries > 0) {
      yield* sql`
      WITH subs AS (SELECT id, row_number() OVER (ORDER BY id) - 1 AS k, count(*) OVER () AS n FROM webhook_subscriptions),
      history AS (
        SELECT s.id, g.i, (g.i / s.n) + 1 AS sequence
        FROM generate_series(0, ${config.historyDeliveries - 1}) AS g(i) JOIN subs AS s ON s.k = g.i % s.n
      ), delivered AS (
        INSERT INTO webhook_deliveries (subscription_id, event_seq, epoch, sequence, state, attempts, last_status, finished_at)
        SELECT id, -1 - i, 1, sequence, 'delivered', 1, 200, clock_timestamp() FROM history
        RETURNING id, subscription_id, sequence
      ), attempts AS (
        INSERT INTO webhook_attempts (delivery_id, number, started_at, duration_ms, status, response_body)
        SELECT id, 1, clock_timestamp(), 2, 200, 'ok' FROM delivered
      )
      UPDATE webhook_subscriptions AS s SET last_sequence = h.last
      FROM (SELECT subscription_id, max(sequence) AS last FROM delivered GROUP BY subscription_id) AS h
      WHERE s.id = h.subscription_id`
    }
    yield* sql.unsafe("VACUUM ANALYZE webhook_deliveries, webhook_attempts, webhook_drains, webhook_subscriptions")
    // The set-up's pages are written now, not by a checkpoint during the measured window (a timed one
    // counts from here, and a run is far shorter than checkpoint_timeout).
    yield* sql.unsafe("CHECKPOINT")
  })

/**
 * The worker side, one pool as one `bothy worker` process would have, under the trace recorder or
 * the telemetry arm; returns once the consumer's start-up round has run and LISTEN is up.
 */
const startWorkerSide = (config: EndToEndConfig, trace: ReturnType<typeof DeliveryTrace.recorder>) =>
  Effect.gen(function* () {
    const server = yield* BenchServer
    const worker = yield* Layer.build(
      Layer.mergeAll(EventLog.layer, Jobs.layer, PermissionGrants.layer, NotificationStream.layer()).pipe(
        Layer.provideMerge(WebhookConfig.layerWith(config.webhookSettings)),
        Layer.provideMerge(server.pool(config.workerConnections)),
      ),
    )
    const arm = config.telemetry
    const roundsEnded = Effect.map(
      Effect.forEach(["Locked", "CaughtUp", "Processed", "Failed"], (outcome) =>
        Metric.value(Metric.withAttributes(ConsumerMetrics.rounds, { consumer: WebhookFanOut.name, outcome })),
      ),
      (states) => states.reduce((n, s) => n + s.count, 0),
    )
    const roundsBefore = yield* roundsEnded
    // As `bothy worker` composes it: the tracer below everything, the endpoint over the worker.
    const tracing =
      arm?.on === true
        ? yield* Layer.build(
            Tracing.layer(
              Option.some({
                url: arm.sink.tracesUrl,
                serviceName: "bothy-bench",
                headers: Redacted.make({}),
                exportInterval: undefined,
              }),
            ),
          )
        : undefined
    const instrumented = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
      arm === undefined
        ? Effect.withTracer(effect, trace.tracer)
        : tracing === undefined
          ? effect
          : Effect.provideContext(effect, tracing)
    yield* Effect.gen(function* () {
      const kind = yield* WebhookDrainer.make
      yield* Layer.build(
        Layer.mergeAll(
          WebhookFanOut.layer({
            batchSize: config.batchSize,
            pollInterval: config.pollInterval,
            cooldown: Duration.millis(config.cooldownMs),
            skipHeld: config.skipHeld,
          }),
          JobWorker.layer({ kinds: [kind], queues: { [WebhookFanOut.queue]: { concurrency: config.concurrency } } }),
          arm?.on === true
            ? Observability.layer(Option.some({ host: "127.0.0.1", port: arm.metricsPort }))
            : Layer.empty,
        ),
      )
    }).pipe(Effect.provide(worker), instrumented)
    if (arm?.on === true) yield* arm.sink.scrape(`http://127.0.0.1:${arm.metricsPort}/metrics`, arm.scrapeEveryMs)
    // Ready: the consumer's start-up round has run and the LISTEN connection is up.
    const stream = Context.get(worker, NotificationStream)
    yield* Effect.gen(function* () {
      while (
        (arm === undefined ? trace.roundsEnded() === 0 : (yield* roundsEnded) === roundsBefore) ||
        Option.isNone(yield* stream.backendPid)
      )
        yield* Effect.sleep("10 millis")
    }).pipe(Effect.timeout("30 seconds"), Effect.orDie)
  })

/** Every second from the production start: the backlog, the drain slots held, the lock waiters. */
const sampleAt = (sql: SqlClient.SqlClient, t0: number) =>
  sql<Omit<Sample, "t">>`
    SELECT (SELECT count(*) FROM webhook_deliveries WHERE state = 'pending')::int AS "pendingDeliveries",
           (SELECT count(*) FROM webhook_drains WHERE job_id IS NOT NULL)::int AS "heldSlots",
           ((SELECT value FROM event_seq)
             - (SELECT last_seq FROM event_consumer_cursors WHERE name = ${WebhookFanOut.name}))::int AS "cursorLag",
           (SELECT count(*) FROM jobs WHERE queue = ${WebhookFanOut.queue}
              AND state IN ('available', 'scheduled', 'retryable'))::int AS "runnableJobs",
           (SELECT count(*) FROM pg_stat_activity
            WHERE wait_event_type = 'Lock' AND application_name = 'bothy-bench'
              AND query NOT LIKE '%UPDATE event_seq%')::int AS "lockWaiters"`.pipe(
    Effect.map(([s]) => ({ t: round3((performance.now() - t0) / 1000), ...s! })),
  )

/** The producer: on a thread of its own (the host app, apart from the worker side), or, with `producerThread` off, a fiber of this process. */
const startProducer = (config: EndToEndConfig, total: number, interval: number) =>
  Effect.gen(function* () {
    const server = yield* BenchServer
    const thread = config.producerThread
      ? yield* ProducerThread.run({
          ...ProducerThread.connectionOf(server),
          connections: config.producerConnections,
          total,
          interval,
          subscriptions: config.subscriptions,
        })
      : undefined
    if (thread !== undefined) yield* thread.ready
    const log =
      thread === undefined
        ? Context.get(
            yield* Layer.build(EventLog.layer.pipe(Layer.provideMerge(server.pool(config.producerConnections)))),
            EventLog,
          )
        : undefined
    return { thread, log }
  })

type Stamps = ProducerThread.Stamps

/** The production window, timed, with the CPU it took and the checkpoints that began in it. */
const produce = (
  config: EndToEndConfig,
  producer: Effect.Success<ReturnType<typeof startProducer>>,
  receiver: Receiver,
  run: { readonly total: number; readonly interval: number; readonly t0: number },
  stamps: Stamps,
) =>
  Effect.gen(function* () {
    const server = yield* BenchServer
    const sql = yield* SqlClient.SqlClient
    const { thread, log } = producer
    const checkpoints = sql<{ n: number }>`
      SELECT (num_timed + num_requested)::int AS n FROM pg_stat_checkpointer`.pipe(
      Effect.map((rows) => rows[0]?.n ?? 0),
    )
    const postmaster = CpuUsage.postmasterPid(server.dataDir)
    if (config.atProductionStart !== undefined) yield* config.atProductionStart
    const receiverMicros0 = yield* receiver.cpuMicros
    const cpu0 = CpuUsage.sample(postmaster)
    const stopProfile = yield* CpuProfile.start(`webhooks-end-to-end-${config.eventsPerSecond}`)
    let producerThreadMicros: number | undefined
    const checkpoints0 = yield* checkpoints
    const production = yield* Throughput.timed(
      thread !== undefined
        ? Effect.map(thread.start(run.t0), (out) => {
            stamps.committedAt.set(out.committedAt)
            stamps.appendMs.set(out.appendMs)
            stamps.lateTick.set(out.lateTick)
            producerThreadMicros = out.cpuMicros
          })
        : ProducerThread.produce(
            log!,
            { total: run.total, interval: run.interval, subscriptions: config.subscriptions, t0: run.t0 },
            stamps,
          ),
    )
    const producedAt = performance.now()
    const cpu1 = CpuUsage.sample(postmaster)
    const receiverThreadMicros = (yield* receiver.cpuMicros) - receiverMicros0
    yield* stopProfile
    const cpu = CpuUsage.since(cpu0, cpu1)
    // The producer's backends (its pool stays open until the scope ends): the host app's appends, not bothy's.
    const producerBackendCores = CpuUsage.backendsCores(
      cpu0,
      cpu1,
      (yield* sql<{ pid: number }>`
        SELECT pid FROM pg_stat_activity WHERE application_name = 'bothy-bench-producer'`).map((r) => r.pid),
    )
    return {
      production,
      producedAt,
      cpu,
      windowMs: cpu1.at - cpu0.at,
      producerThreadMicros,
      receiverThreadMicros,
      producerBackendCores,
      checkpointsWhileProducing: (yield* checkpoints) - checkpoints0,
    }
  })
type Production = Effect.Success<ReturnType<typeof produce>>

/** The run's events (seq to index) and what the database recorded of their deliveries and jobs. */
const recorded = (base: bigint) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const seqRows = yield* sql<{ seq: bigint; i: number }>`
    SELECT seq, (payload->>'i')::int AS i FROM event_log WHERE seq > ${base}`
    const [attempts] = yield* sql<{
      attempts: number
      non2xx: number
      deliveries: number
      delivered: number
      jobs: number
    }>`
    WITH run AS (SELECT id, state FROM webhook_deliveries WHERE event_seq > ${base}),
    tries AS (SELECT a.status FROM webhook_attempts AS a JOIN run ON run.id = a.delivery_id)
    SELECT (SELECT count(*) FROM tries)::int AS attempts,
           (SELECT count(*) FROM tries WHERE status IS NULL OR status NOT BETWEEN 200 AND 299)::int AS non2xx,
           (SELECT count(*) FROM run)::int AS deliveries,
           (SELECT count(*) FROM run WHERE state = 'delivered')::int AS delivered,
           (SELECT count(*) FROM jobs WHERE kind = ${WebhookFanOut.deliverKind})::int AS jobs`

    return { seqRows, attempts: attempts! }
  })
type Recorded = Effect.Success<ReturnType<typeof recorded>>

/** Each event's round and delivery attempt, from the spans. */
const eventIndex = (total: number, trace: ReturnType<typeof DeliveryTrace.recorder>, { seqRows }: Recorded) => {
  const roundOf = new Int32Array(total).fill(-1)
  const seqOf = new Array<string | undefined>(total)
  const indexOfSeq = new Map(seqRows.map((r) => [r.seq, r.i]))
  for (const r of seqRows) if (r.i >= 0 && r.i < total) seqOf[r.i] = r.seq.toString()
  trace.rounds.forEach((r, n) => {
    for (let seq = r.fromSeq; seq <= r.toSeq; seq++) {
      const i = indexOfSeq.get(seq)
      if (i !== undefined && i >= 0 && i < total) roundOf[i] = n
    }
  })
  const attemptOf = (i: number) => {
    const seq = seqOf[i]
    return seq === undefined ? undefined : trace.attempts.get(seq)
  }
  const roundEnd = (i: number) => trace.rounds[roundOf[i]!]?.end ?? Number.NaN
  const roundStart = (i: number) => trace.rounds[roundOf[i]!]?.start ?? Number.NaN
  return { attemptOf, roundEnd, roundStart }
}
type EventIndex = ReturnType<typeof eventIndex>

const nan = (n: number | undefined) => (n === undefined || !Number.isFinite(n) ? Number.NaN : n)

/**
 * Consecutive deliveries of one subscription where the next was already waiting when the
 * previous attempt ended: the drainer's cycle time from one attempt's start to the next.
 */
const cycles = (delivered: ReadonlyArray<number>, { attemptOf, roundEnd }: EventIndex) => {
  const cycleTimes: Array<number> = []
  const handoverGaps: Array<number> = []
  const bySub = new Map<string, Array<number>>()
  for (const i of delivered) {
    const a = attemptOf(i)
    if (a !== undefined) bySub.set(a.subscription, [...(bySub.get(a.subscription) ?? []), i])
  }
  for (const list of bySub.values()) {
    list.sort((a, b) => a - b)
    for (let n = 1; n < list.length; n++) {
      const prev = attemptOf(list[n - 1]!)
      const next = attemptOf(list[n]!)
      if (prev === undefined || next === undefined) continue
      if (roundEnd(list[n]!) < prev.end) {
        handoverGaps.push(next.start - prev.end)
        cycleTimes.push(next.start - prev.start)
      }
    }
  }
  return { cycleTimes, handoverGaps }
}

/** What the window's samples and the drain say of the backlog. */
interface BacklogInput {
  readonly samples: ReadonlyArray<Sample>
  readonly atProductionEnd: Sample
  readonly afterDrain: Sample
  readonly receivedAtProductionEnd: number
  readonly producedAt: number
  readonly drainedAt: number
  readonly warm: number
  readonly total: number
  readonly interval: number
}

const backlogOf = (config: EndToEndConfig, t: Tally, b: BacklogInput) => {
  const {
    samples,
    atProductionEnd,
    afterDrain,
    receivedAtProductionEnd,
    producedAt,
    drainedAt,
    warm,
    total,
    interval,
  } = b
  const received = t.received
  const windowSamples = samples.filter((s) => s.t * 1000 >= warm * interval && s.t * 1000 <= (total - 1) * interval)
  const limit = config.flatSlopeShare * config.eventsPerSecond
  const pending = series(windowSamples, (s) => s.pendingDeliveries, limit)
  const lag = series(windowSamples, (s) => s.cursorLag, limit)
  return {
    criterion: `flat = least-squares slope over the measured window's 1 s samples <= ${config.flatSlopeShare * 100}% of the offered rate (${limit}/s), for pending deliveries and for the cursor lag alike`,
    flat: pending.flat && lag.flat,
    lockWaiters: {
      note: "worker-side backends waiting on a lock at each sample in the measured window (producers excluded)",
      mean: round3(windowSamples.reduce((n, x) => n + x.lockWaiters, 0) / Math.max(1, windowSamples.length)),
      max: Math.max(0, ...windowSamples.map((x) => x.lockWaiters)),
    },
    pendingDeliveries: pending,
    cursorLag: lag,
    atProductionEnd: {
      pendingDeliveries: atProductionEnd.pendingDeliveries,
      cursorLag: atProductionEnd.cursorLag,
      runnableJobs: atProductionEnd.runnableJobs,
      notYetReceived: total - receivedAtProductionEnd,
    },
    afterDrain: {
      pendingDeliveries: afterDrain.pendingDeliveries,
      cursorLag: afterDrain.cursorLag,
      notReceived: total - received,
    },
    drained: received === total,
    /** Requests per second after the producer stopped, until drained (or the bound). */
    drainDeliveriesPerSecond: round3(((received - receivedAtProductionEnd) / (drainedAt - producedAt)) * 1000),
    drainSeconds: round3((drainedAt - producedAt) / 1000),
    drainBoundSeconds: config.drainSeconds,
    samples,
  }
}

const breakdownOf = (
  of: (f: (i: number) => number) => Distribution,
  { attemptOf, roundEnd, roundStart }: EventIndex,
  committedAt: Float64Array,
  arrivedAt: Float64Array,
) => ({
  note:
    "per delivered event; commitToRoundEnd + roundEndToAttempt + attemptToSend + sendToArrival = latency. " +
    "roundEndToAttempt: from the round's commit to the start of the attempt that sent it: waking a drainer (claim, acquire) or the running drainer finishing the subscription's earlier deliveries, and the take statement",
  commitToRoundStart: of((i) => roundStart(i) - committedAt[i]!),
  roundDuration: of((i) => roundEnd(i) - roundStart(i)),
  commitToRoundEnd: of((i) => roundEnd(i) - committedAt[i]!),
  roundEndToAttempt: of((i) => nan(attemptOf(i)?.start) - roundEnd(i)),
  attemptToSend: of((i) => nan(attemptOf(i)?.send?.start) - nan(attemptOf(i)?.start)),
  sendToArrival: of((i) => arrivedAt[i]! - nan(attemptOf(i)?.send?.start)),
  arrivalToAnswered: of((i) => nan(attemptOf(i)?.end) - arrivedAt[i]!),
})

const perSubscriptionOf = (
  config: EndToEndConfig,
  of: (f: (i: number) => number) => Distribution,
  index: EventIndex,
  delivered: ReadonlyArray<number>,
) => {
  const { attemptOf } = index
  const { cycleTimes, handoverGaps } = cycles(delivered, index)
  return {
    note: "a subscription's deliveries go out one at a time, in order, from its drainer: its ceiling is 1000 / cycleMs deliveries/s, against rate/subscriptions offered",
    offeredPerSecond: config.eventsPerSecond / config.subscriptions,
    attemptMs: of((i) => nan(attemptOf(i)?.end) - nan(attemptOf(i)?.start)),
    handoverGapMs: distribution(handoverGaps),
    cycleMs: distribution(cycleTimes),
  }
}

const jobsOf = (trace: ReturnType<typeof DeliveryTrace.recorder>, { attempts }: Recorded) => {
  const statements = trace.statements()
  return {
    note: "drain jobs created by rounds and runs of them (a run that finds a live drainer holding the slot ends at once); statements under Job.run: acquire, take, permission check, record, release",
    created: attempts!.jobs,
    runs: trace.jobRuns(),
    runsPerDelivery: round3(trace.jobRuns() / Math.max(1, attempts!.deliveries)),
    statementsPerDelivery: round3(statements.count / Math.max(1, attempts!.deliveries)),
    statementMsPerDelivery: round3(statements.ms / Math.max(1, attempts!.deliveries)),
    attempts: attempts!.attempts,
    non2xxAttempts: attempts!.non2xx,
    deliveries: attempts!.deliveries,
    deliveredRows: attempts!.delivered,
  }
}

const roundsOf = (trace: ReturnType<typeof DeliveryTrace.recorder>) => ({
  processed: trace.rounds.length,
  eventsPerRound: distribution(trace.rounds.map((r) => r.events)),
  durationMs: distribution(trace.rounds.map((r) => r.end - r.start)),
  fanOutStatementMs: distribution(trace.rounds.map((r) => r.fanOutMs)),
  jobsInsertMs: distribution(trace.rounds.map((r) => r.jobsInsertMs)),
})

/** Waits for every request, within the bound; what the receiver had at the production's end comes first. */
const drain = (config: EndToEndConfig, receiver: Receiver, total: number, producedAt: number) =>
  Effect.gen(function* () {
    const deadline = producedAt + config.drainSeconds * 1000
    while (receiver.received() < total && performance.now() < deadline) yield* Effect.sleep("20 millis")
    return performance.now()
  })

export const measure = (config: EndToEndConfig) =>
  Effect.gen(function* () {
    const server = yield* BenchServer
    const sql = yield* SqlClient.SqlClient
    yield* resetSlate

    const interval = 1000 / config.eventsPerSecond
    const warm = Math.round(config.warmupSeconds * config.eventsPerSecond)
    const total = warm + Math.round(config.seconds * config.eventsPerSecond)
    const stamps = ProducerThread.unstamped(total)
    const receiver = yield* ReceiverThread.start(total)
    yield* createSubscriptions(config, receiver)
    const [row] = yield* sql<{ base: bigint }>`SELECT value AS base FROM event_seq`
    const base = row!.base

    const trace = DeliveryTrace.recorder()
    yield* startWorkerSide(config, trace)
    const arm = config.telemetry

    const producer = yield* startProducer(config, total, interval)
    const t0 = performance.now() + 10
    const samples: Array<Sample> = []
    const sampler = yield* everySecond(t0, sampleAt(sql, t0), samples)
    const p = yield* produce(config, producer, receiver, { total, interval, t0 }, stamps)
    const atProductionEnd = yield* sampleAt(sql, t0)
    const receivedAtProductionEnd = receiver.received()

    const drainedAt = yield* drain(config, receiver, total, p.producedAt)
    const t = receiver.tally()
    yield* Fiber.interrupt(sampler)
    const afterDrain = yield* sampleAt(sql, t0)
    if (arm?.on === true) yield* arm.sink.scrape(null, arm.scrapeEveryMs)
    // Counted after the drain: the exporter's last batch of the run has gone out by then.
    const sinkStats = arm?.on === true ? yield* arm.sink.stats : undefined
    const fdatasyncMsAfter = (yield* Conditions.storage(server.folder)).fdatasyncMs
    const db = yield* recorded(base)
    return figures(
      config,
      { trace, db, t, stamps, p, warm, total, interval, t0 },
      {
        samples,
        atProductionEnd,
        afterDrain,
        receivedAtProductionEnd,
        producedAt: p.producedAt,
        drainedAt,
        warm,
        total,
        interval,
      },
      { arm, sinkStats, fdatasyncMsAfter },
    )
  }).pipe(Effect.scoped)

/** Everything a run measured, for its figures. */
interface Measured {
  readonly trace: ReturnType<typeof DeliveryTrace.recorder>
  readonly db: Recorded
  readonly t: Tally
  readonly stamps: Stamps
  readonly p: Production
  readonly warm: number
  readonly total: number
  readonly interval: number
  readonly t0: number
}

/** The figures over the measured events (after the warm-up). */
const figures = (
  config: EndToEndConfig,
  m: Measured,
  backlog: BacklogInput,
  extra: {
    readonly arm: TelemetryArm | undefined
    readonly sinkStats: Effect.Success<Extract<TelemetryArm, { readonly on: true }>["sink"]["stats"]> | undefined
    readonly fdatasyncMsAfter: Effect.Success<ReturnType<typeof Conditions.storage>>["fdatasyncMs"]
  },
) => {
  const { trace, t, p, warm, total, interval, t0 } = m
  const { committedAt, appendMs, lateTick } = m.stamps
  const { arrivedAt } = t
  const { arm } = extra
  const { production, cpu } = p
  const index = eventIndex(total, trace, m.db)
  const measured = Array.from({ length: total - warm }, (_, k) => warm + k)
  const delivered = measured.filter((i) => !Number.isNaN(arrivedAt[i]!))
  const of = (f: (i: number) => number) => distribution(delivered.map(f))
  const windowStart = t0 + warm * interval
  const windowEnd = t0 + (total - 1) * interval
  const arrivalsInWindow = Array.from(arrivedAt).filter((a) => a >= windowStart && a <= windowEnd).length
  const lastArrival = Math.max(...delivered.map((i) => arrivedAt[i]!))
  return {
    events: measured.length,
    delivered: delivered.length,
    undelivered: measured.length - delivered.length,
    duplicates: t.duplicates,
    outOfOrder: t.outOfOrder,
    unexpectedRequests: t.unexpected,
    achievedEventsPerSecond: round3(((measured.length - 1) / (committedAt[total - 1]! - committedAt[warm]!)) * 1000),
    deliveriesPerSecond: round3((arrivalsInWindow / (windowEnd - windowStart)) * 1000),
    measuredDeliveriesPerSecond: round3(
      ((delivered.length - 1) / (lastArrival - Math.min(...delivered.map((i) => arrivedAt[i]!)))) * 1000,
    ),
    latencyMs: of((i) => arrivedAt[i]! - committedAt[i]!),
    backlog: backlogOf(config, t, backlog),
    breakdownMs: breakdownOf(of, index, committedAt, arrivedAt),
    perSubscription: perSubscriptionOf(config, of, index, delivered),
    jobs: jobsOf(trace, m.db),
    rounds: roundsOf(trace),
    producer: {
      appendMs: distribution(measured.map((i) => appendMs[i]!)),
      lateTickMs: distribution(measured.map((i) => lateTick[i]!)),
      producedSeconds: round3(production.seconds),
    },
    clientCores: production.clientCores,
    machineBusy: production.machineBusy,
    /** While producing: this process (producer, consumer, drainers, receiver) and the server, in cores. */
    cpu: {
      ...cpu,
      msPerEvent: round3(((cpu.clientCores + cpu.serverCores) * production.seconds * 1000) / total),
      bothy: bothyCpu(cpu, p, total),
    },
    telemetry:
      arm === undefined
        ? undefined
        : { on: arm.on, ...(arm.on ? { scrapeEveryMs: arm.scrapeEveryMs, sink: extra.sinkStats } : {}) },
    fdatasyncMsAfter: extra.fdatasyncMsAfter,
    /** Checkpoints (timed or requested) that began while producing. */
    checkpointsWhileProducing: p.checkpointsWhileProducing,
  }
}

/**
 * The worker side's own CPU per event: this process less the producer thread (the host app) and
 * the receiver thread (the tenants' endpoints), and the server less the producer's backends.
 */
const bothyCpu = (cpu: CpuUsage.CpuUsed, p: Production, events: number) => {
  const { producerThreadMicros, receiverThreadMicros, producerBackendCores, windowMs } = p
  if (producerThreadMicros === undefined) return undefined
  const cores = (micros: number) => micros / 1000 / windowMs
  const processCores = cpu.clientCores - cores(producerThreadMicros) - cores(receiverThreadMicros)
  const serverCores = cpu.serverCores - producerBackendCores
  const perEvent = (c: number) => round3((c * windowMs) / events)
  return {
    note: "this process less the producer and receiver threads (process.threadCpuUsage in each), in cores; the server less the producer's backends",
    processCores: round3(processCores),
    producerThreadCores: round3(cores(producerThreadMicros)),
    receiverThreadCores: round3(cores(receiverThreadMicros)),
    serverCores: round3(serverCores),
    producerBackendCores,
    processMsPerEvent: perEvent(processCores),
    receiverMsPerEvent: perEvent(cores(receiverThreadMicros)),
    producerBackendMsPerEvent: perEvent(producerBackendCores),
    serverMsPerEvent: perEvent(serverCores),
    msPerEvent: perEvent(processCores + serverCores),
  }
}

export type EndToEndResult = Effect.Success<ReturnType<typeof measure>>
export type { Distribution }
