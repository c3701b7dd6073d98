/**
 * Push fan-out: one event into a space of N members with one registration each, from its commit to
 * the N-th message received, decrypted, at the push service: pushes sent per second, and the CPU
 * each push costs, with the VAPID token reused per push-service origin (as `bothy worker` sends) or
 * signed for every request (`signEach`, the baseline), in the same run.
 *
 *   append (this process) ──commit──> round: N / push.batch_size `push.batch` jobs in one statement
 *   ──> JobWorker (queue push, `concurrency` jobs at once): per job read, permissions, then per
 *   registration encrypt, VAPID, POST (at most push.max_in_flight requests in flight) ──> push service thread
 *   CPU: from just before the append until every job is final; this process minus the push
 *   service's thread (the sender: consumer, job worker, completer), and the server's processes
 *
 * Checked after every run: each of the N registrations got exactly one message for the event, with
 * the `Topic` bothy derives from that event and registration, every message passed the push
 * service's checks (VAPID token, headers, the aes128gcm header), and those of a seeded sample of
 * the registrations (`verifyEvery`: one in that many, at most 10, as the issue allows for this
 * part) decrypted to an envelope naming the event; a run that fails the check has no figure.
 * Pushes are counted from what the push service received, not from the jobs: a batch job's args
 * list only the registrations it has left.
 */
import { Effect } from "effect"
import { EventLog } from "../../src/log/EventLog.ts"
import type { PushSettings } from "../../src/push/PushConfig.ts"
import * as PushEnvelope from "../../src/push/PushEnvelope.ts"
import * as PushMessageKey from "../../src/push/PushMessageKey.ts"
import * as PushRequest from "../../src/push/PushRequest.ts"
import * as PushVapid from "../../src/push/PushVapid.ts"
import { BenchServer } from "../harness/BenchServer.ts"
import * as CpuProfile from "../harness/CpuProfile.ts"
import * as CpuUsage from "../harness/CpuUsage.ts"
import { distribution } from "../harness/Distribution.ts"
import { round3 } from "../harness/Figures.ts"
import { type BenchPushService, type Sample, type Subscription, sampled } from "./BenchPushService.ts"
import * as EventLoopDelay from "./EventLoopDelay.ts"
import * as PushSample from "./PushSample.ts"
import * as PushTrace from "./PushTrace.ts"

export interface PushBurstConfig {
  readonly signEach: boolean
  readonly concurrency: number
  readonly workerConnections: number
  readonly batchSize: number
  readonly cooldownMs: number
  /** The push service decrypts the messages of one registration in this many (1: all; at most 10). */
  readonly verifyEvery: number
  /** Bound on the wait for every message (and every job to be final). */
  readonly drainSeconds: number
}

export const space = "burst"

/**
 * By registration, the first arrival of the event's message at the push service; the rest are
 * duplicates or strays. A message is the event's when its `Topic` is the one bothy derives from the
 * event and the registration, and, when it was decrypted, its envelope names the event.
 */
const tallyArrivals = (
  service: BenchPushService,
  from: number,
  members: ReadonlyArray<PushSample.Registered>,
  event: { readonly epoch: number; readonly seq: number },
) => {
  const n = members.length
  const slotOf = new Map(members.map((m, k) => [m.subscription, k]))
  const topics = members.map((m) =>
    PushMessageKey.topic(PushMessageKey.make(event.epoch, m.registration, BigInt(event.seq))),
  )
  const arrivedAt = new Float64Array(n).fill(Number.NaN)
  let duplicates = 0
  let unexpected = 0
  let opened = 0
  const { arrivals } = service
  for (let k = from; k < arrivals.at.length; k++) {
    const slot = slotOf.get(arrivals.subscription[k]!)
    const seq = arrivals.seq[k]!
    if (slot === undefined || arrivals.topic[k] !== topics[slot] || (seq !== -1 && seq !== event.seq)) unexpected++
    else if (!Number.isNaN(arrivedAt[slot]!)) duplicates++
    else {
      arrivedAt[slot] = arrivals.at[k]!
      if (seq !== -1) opened++
    }
  }
  const missing = arrivedAt.reduce((m, a) => m + (Number.isNaN(a) ? 1 : 0), 0)
  return { arrivedAt, duplicates, unexpected, missing, opened }
}

/** Exactly once, by registration, and everything final: the run's check, and each registration's arrival. */
const judge = (
  service: BenchPushService,
  members: ReadonlyArray<PushSample.Registered>,
  run: {
    readonly event: { readonly epoch: number; readonly seq: number }
    readonly sample: Sample
    readonly received0: number
    readonly rejected0: number
    readonly pending: number
  },
) =>
  Effect.gen(function* () {
    const n = members.length
    const { arrivedAt, duplicates, unexpected, missing, opened } = tallyArrivals(
      service,
      run.received0,
      members,
      run.event,
    )
    const inSample = members.filter((m) => sampled(run.sample, m.subscription)).length
    const rejections = service.rejections.slice(run.rejected0)
    const jobs = yield* PushSample.jobsOfRun
    const passed =
      missing === 0 &&
      duplicates === 0 &&
      unexpected === 0 &&
      rejections.length === 0 &&
      run.pending === 0 &&
      opened === inSample
    const check = {
      passed,
      rule: "each registration of the space got exactly one message for the event (its Topic derived from the event and the registration), with a valid VAPID token and aes128gcm header; those of the seeded sample decrypted to an envelope naming the event; every job final",
      expected: n,
      arrived: n - missing,
      /** The seeded sample: registrations whose message was decrypted (one in `every`). */
      sample: { ...run.sample, registrations: inSample, opened },
      missing,
      duplicates,
      unexpected,
      rejections: rejections.length,
      firstRejections: rejections.slice(0, 5),
      pendingJobsAtEnd: run.pending,
      jobsByState: jobs.states,
      /** Batch jobs that recorded an error (a retry, or dead registrations named in the reason). */
      jobsWithErrors: jobs.withErrors,
      firstJobErrors: jobs.firstErrors,
    }
    return { arrivedAt, check }
  })

export const measure = (
  config: PushBurstConfig,
  world: {
    readonly push: PushSettings
    readonly service: BenchPushService
    readonly members: ReadonlyArray<PushSample.Registered>
  },
) =>
  Effect.gen(function* () {
    const server = yield* BenchServer
    const { service, members } = world
    const n = members.length
    const { connectionsAtStart } = yield* PushSample.reset
    const trace = PushTrace.recorder()
    const worker = yield* PushSample.startWorker(
      server,
      world.push,
      {
        connections: config.workerConnections,
        batchSize: config.batchSize,
        pollInterval: "1 second",
        cooldownMs: config.cooldownMs,
        concurrency: config.concurrency,
        signEach: config.signEach,
      },
      trace.roundsEnded,
      trace.tracer,
    )
    const log = yield* EventLog.pipe(Effect.provide(worker))
    const received0 = service.received()
    const rejected0 = service.rejections.length
    const notified0 = service.notified.length
    const sample = { every: config.verifyEvery, seed: Math.floor(Math.random() * 2 ** 31) }
    yield* service.sample(sample)

    const postmaster = CpuUsage.postmasterPid(server.dataDir)
    const cpu0 = CpuUsage.sample(postmaster)
    const service0 = yield* service.cpuMicros
    const loop = yield* EventLoopDelay.monitor
    const stopProfile = yield* CpuProfile.start(`push-fanout-${n}`)
    const appended = yield* Effect.flatMap(
      log.append([
        { space, type: "burst.posted", actor: "burst-author", payload: { summary: "one event, every member" } },
      ]),
      log.sequenced,
    )
    const committedAt = performance.now()
    const seq = Number(appended.lastSeq)
    const epoch = appended.epoch

    const deadline = committedAt + config.drainSeconds * 1000
    while (service.received() - received0 < n && performance.now() < deadline) yield* Effect.sleep("10 millis")
    const allArrived = performance.now()
    let pending = yield* PushSample.pendingJobs
    while (pending > 0 && performance.now() < deadline) {
      yield* Effect.sleep("20 millis")
      pending = yield* PushSample.pendingJobs
    }
    const cpu1 = CpuUsage.sample(postmaster)
    yield* stopProfile
    const service1 = yield* service.cpuMicros
    const eventLoopDelayMs = loop.read()
    yield* Effect.sleep("100 millis") // duplicates already on their way

    const { arrivedAt, check } = yield* judge(service, members, {
      event: { epoch, seq },
      sample,
      received0,
      rejected0,
      pending,
    })
    const { passed } = check
    const pushes = n - check.missing

    // ---- figures ----
    const first = Math.min(...Array.from(arrivedAt).filter((a) => !Number.isNaN(a)))
    const last = Math.max(...Array.from(arrivedAt).filter((a) => !Number.isNaN(a)))
    const round = trace.rounds.find((r) => Number(r.fromSeq) <= seq && seq <= Number(r.toSeq))
    const seconds = (cpu1.at - cpu0.at) / 1000
    const used = CpuUsage.since(cpu0, cpu1)
    const serviceMs = (service1 - service0) / 1000
    const processMs = (cpu1.client.user - cpu0.client.user + cpu1.client.system - cpu0.client.system) / 1000 // all threads
    const senderMs = processMs - serviceMs
    const serverMs = used.serverCores * seconds * 1000
    const runs = [...trace.runs.values()].flat()
    /** Every span of one kind across all attempts, and their sum per push received. */
    const perMessage = (pick: (r: PushTrace.JobRun) => ReadonlyArray<{ start: number; end: number }>) => {
      const d = distribution(runs.flatMap(pick).map((i) => i.end - i.start))
      return { ...d, totalMsPerPush: round3((d.mean * d.count) / pushes) }
    }

    return {
      check,
      signEach: config.signEach,
      /** Messages the push service received (distinct registrations), not jobs. */
      pushes,
      // A run that failed the check has no figure.
      pushesPerSecond: passed ? round3((pushes / (last - committedAt)) * 1000) : undefined,
      commitToJobsClaimableMs: round === undefined ? Number.NaN : round3(round.end - committedAt),
      /** The same, to the round's NOTIFY reaching a listener on the push service's thread (the database's commit). */
      commitToJobsNotifiedMs: round3((service.notified[notified0] ?? Number.NaN) - committedAt),
      commitToFirstMs: round3(first - committedAt),
      commitToLastMs: round3(last - committedAt),
      lastArrivalToJobsFinalMs: round3(cpu1.at - allArrived),
      /** `jobs`: the `push.batch` jobs the round made (one per push.batch_size registrations), not pushes. */
      round: round === undefined ? undefined : { durationMs: round3(round.end - round.start), jobs: round.jobs },
      cpu: {
        note: "from just before the append until every job was final; sender = this process (all its threads) minus the push service's thread",
        seconds: round3(seconds),
        senderMsPerPush: passed ? round3(senderMs / pushes) : undefined,
        serverMsPerPush: round3(serverMs / pushes),
        pushServiceMsPerPush: round3(serviceMs / pushes),
        senderCores: round3(senderMs / 1000 / seconds),
        serverCores: used.serverCores,
        machineBusy: used.machineBusy,
      },
      connectionsAtStart,
      /** The worker side's event loop (this process's main thread), append to every job final. */
      eventLoopDelayMs,
      spansMs: {
        note: "wall time of the spans of every push.batch attempt (PushTrace); batchRun = one attempt of a batch job (its messages sent concurrently), sendsPerRun = the sends in it; build = PushEncryption.buildMany of one attempt's messages (encryption and headers, on the threads; the VAPID token is taken just before it), or PushRequest.build of one message on the event loop, send = OutboundSender.send of one message (request and answer); totalMsPerPush = their sum over all attempts / pushes received",
        batchRun: distribution(runs.map((r) => r.end - r.start)),
        sendsPerRun: distribution(runs.map((r) => r.sends.length)),
        build: perMessage((r) => r.builds),
        send: perMessage((r) => r.sends),
      },
    }
  }).pipe(Effect.ensuring(world.service.sample({ every: 1, seed: 0 })), Effect.scoped)

export type PushBurstResult = Effect.Success<ReturnType<typeof measure>>

/**
 * The two CPU costs of a push that are this process's own, apart, on this thread and nothing else
 * running in it: signing a VAPID token (what reuse saves) and building the request (encrypting the
 * envelope: a fresh P-256 key pair and ECDH per message, HKDF, AES-GCM), `calls` times each. In µs
 * of this thread's CPU per call.
 */
export const pieces = (push: PushSettings, subscription: Subscription, calls: number) =>
  Effect.gen(function* () {
    const origin = new URL(subscription.endpoint).origin
    const tokens = yield* PushVapid.makeTokenCache(push.vapid, { signEach: true })
    const cpuMicros = () => {
      const used = process.threadCpuUsage()
      return used.user + used.system
    }
    const timed = <A, E>(effect: Effect.Effect<A, E>) =>
      Effect.gen(function* () {
        const t0 = cpuMicros()
        for (let k = 0; k < calls; k++) yield* effect
        return round3((cpuMicros() - t0) / calls)
      })
    const authorization = yield* tokens.authorization(origin)
    const key = PushMessageKey.make(1, "1", 123_456n)
    const payload = PushEnvelope.body({
      key,
      type: "burst.posted",
      space,
      epoch: 1,
      seq: 123_456n,
      occurredAt: new Date(),
      summary: "one event, every member",
    })
    const build = PushRequest.build({
      endpoint: subscription.endpoint,
      p256dh: subscription.keys.p256dh,
      auth: subscription.keys.auth,
      payload,
      ttlSeconds: 86_400,
      urgency: "normal",
      topic: PushMessageKey.topic(key),
      authorization,
    })
    return {
      calls,
      signTokenMicros: yield* timed(tokens.authorization(origin)),
      buildRequestMicros: yield* timed(build),
    }
  })
