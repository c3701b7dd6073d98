/**
 * The push job: one event's Web Push message to each registration of a batch (`PushJob`), on
 * every attempt:
 *
 *   read the event, the registrations left and, when `Permissions` answers in SQL, each principal's
 *   right (`PushTargets`, one statement)
 *     event gone from the log, or older than the TTL ──> dead (expired): the push service would drop it
 *   ask `Permissions` once per principal it did not answer for in SQL
 *   per registration, at most `push.max_in_flight` at once in the worker (`PushBatch.Ledger` keeps
 *   what became of each):
 *     gone from the table ──> settled (nothing to send to)
 *     no `push.deliver` right on the event's space ──> dead (denied), no request
 *     its push service throttled this attempt ──> held back with it, no request
 *     build the request (`PushRequest`: aes128gcm, on a `PushEncryption` thread; the VAPID token of
 *     the push service's origin) and POST it through the shared checked connections
 *     (`PushConnections`: HTTP/2 per push service when it speaks it)
 *     act on `PushOutcome.classify`: delivered; gone ──> remove the registration; 429 ──> its origin
 *     held back; 5xx or network ──> left to retry; dead ──> settled, counted
 *   record the plan (`PushBatch.Ledger.plan`): the registrations left as the job's args, each other
 *   throttled origin as a job of its own at its `Retry-After`; then done, dead, retried or snoozed
 *
 * Exactly once per registration: while the batch runs, what has settled is written to the job's
 * args (`JobProgress`) one write at a time, the next write starting as the last one ends, so that
 * an attempt after a crash sends only to what no write recorded; an interrupted attempt (timeout,
 * fence, shutdown) writes what it knows before it ends. What a crash leaves unrecorded (sent, its
 * answer not yet written) is sent again with the same idempotency key (`PushMessageKey`: the
 * `Topic` header, the envelope's `id` and `tag`), which a device drops. The TTL header is what is
 * left of the TTL since the event's commit, so a retried message never outlives the first one's
 * deadline.
 */
import { Clock, Duration, Effect, Metric, Schema, Semaphore } from "effect"
import { SqlClient } from "effect/sql"
import { Permissions, pushDeliver } from "../authz/Permissions.ts"
import * as JobKind from "../jobs/JobKind.ts"
import * as OutboundSender from "../outbound/OutboundSender.ts"
import * as ThrottledWarnings from "../platform/ThrottledWarnings.ts"
import { Ledger } from "./PushBatch.ts"
import { defaults, PushConfig } from "./PushConfig.ts"
import * as PushConnections from "./PushConnections.ts"
import * as PushEncryption from "./PushEncryption.ts"
import * as PushEnvelope from "./PushEnvelope.ts"
import { asBatch, BatchArgs, type DeliverArgs, deliverKind, LegacyArgs, legacyDeliverKind } from "./PushJob.ts"
import * as PushMessageKey from "./PushMessageKey.ts"
import * as PushMetrics from "./PushMetrics.ts"
import * as PushOutcome from "./PushOutcome.ts"
import * as PushProgress from "./PushProgress.ts"
import * as PushSchedule from "./PushSchedule.ts"
import { readTargets, type Target, type TargetEvent } from "./PushTargets.ts"
import * as PushVapid from "./PushVapid.ts"

/** A retry's reason, kept on the job row: short, since a message may be retried for a whole day. */
export class PushServiceUnavailable extends Schema.TaggedError<PushServiceUnavailable>()("PushServiceUnavailable", {
  reason: Schema.String,
}) {
  override get message() {
    return this.reason
  }
}

/** Limits of one push request: push services answer fast, and a message is small. */
export const sendLimits: Partial<OutboundSender.SendLimits> = {
  connectTimeout: "5 seconds",
  totalTimeout: "10 seconds",
  maxRequestBytes: 8 * 1024,
  maxResponseBytes: 2000,
}

type Outcome = (typeof PushMetrics.deliveryOutcomes)[number]

const count = (outcome: Outcome, n = 1) => Metric.update(Metric.withAttributes(PushMetrics.deliveries, { outcome }), n)

/** One attempt's view of its batch: the event, the time left of its TTL, and the rights asked. */
interface Attempt {
  readonly args: BatchArgs
  readonly event: TargetEvent
  readonly rights: ReadonlyMap<string, boolean>
  readonly ledger: Ledger
  readonly progress: PushProgress.PushProgress
}

/**
 * The job kinds, with the VAPID token cache's options (`PushVapid.TokenCacheOptions`): the default
 * reuses a token per push-service origin; `{ signEach: true }` is the baseline the push benchmark
 * prices that reuse against. The batch kind and the single-message kind of earlier versions share
 * one token cache, one set of connections and one limit of requests in flight.
 */
export const makeKinds = Effect.fnUntraced(function* (options: { readonly tokens?: PushVapid.TokenCacheOptions } = {}) {
  yield* PushMetrics.atZero
  const config = yield* PushConfig
  const permissions = yield* Permissions
  const sql = yield* SqlClient.SqlClient
  const tokens = yield* PushVapid.makeTokenCache(config.vapid, options.tokens)
  const connections = yield* PushConnections.make(config, sendLimits)
  const encryption = yield* PushEncryption.make(config.encryptionThreads ?? defaults.encryptionThreads)
  const inFlight = yield* Semaphore.make(config.maxInFlight)
  const ttlMillis = Duration.toMillis(config.ttl)
  // Once a minute per push service: a wrong VAPID key fails every message to it.
  const configError = ThrottledWarnings.make("1 minute", Effect.logError)

  const removeRegistration = (id: string) =>
    Effect.gen(function* () {
      const gone = yield* sql`DELETE FROM push_registrations WHERE id = ${id}::bigint RETURNING id`
      if (gone.length > 0) {
        yield* Metric.update(Metric.withAttributes(PushMetrics.registrationsRemoved, { cause: "gone" }), 1)
        yield* Effect.logInfo(`push: registration ${id} removed: its push service says it is gone`)
      }
    })

  /** What is left of the TTL now, in milliseconds. */
  const ttlLeft = (event: TargetEvent) =>
    Effect.map(Clock.currentTimeMillis, (now) => ttlMillis - (now - event.occurredAt.getTime()))

  /** Each principal's right: from SQL where it answered, else asked here in one call, once per principal. */
  const rightsOf = (targets: ReadonlyArray<Target>, space: string) =>
    Effect.gen(function* () {
      const rights = new Map<string, boolean>()
      for (const t of targets) if (t.principal !== null && t.allowed !== null) rights.set(t.principal, t.allowed)
      const unasked = [
        ...new Set(targets.flatMap((t) => (t.principal === null || rights.has(t.principal) ? [] : [t.principal]))),
      ]
      if (unasked.length > 0) {
        const answers = yield* permissions.allowedEach(
          unasked.map((principal) => ({ principal, action: pushDeliver, spaceId: space })),
        )
        for (const [i, principal] of unasked.entries()) rights.set(principal, answers[i] === true)
      }
      return rights
    })

  /** The request to one registration, sent, and what its answer makes of it. */
  const send = (attempt: Attempt, t: Target & { readonly endpoint: string }, origin: string) =>
    Effect.gen(function* () {
      const { event, ledger, args } = attempt
      const left = yield* ttlLeft(event)
      const key = PushMessageKey.make(event.epoch, t.registration, BigInt(args.seq))
      const payload = PushEnvelope.body({ key, ...event, seq: BigInt(args.seq) })
      const request = yield* encryption
        .build({
          endpoint: t.endpoint,
          p256dh: t.p256dh!,
          auth: t.auth!,
          payload,
          ttlSeconds: Math.max(0, Math.ceil(left / 1000)),
          urgency: "normal",
          topic: PushMessageKey.topic(key),
          authorization: yield* tokens.authorization(origin),
        })
        .pipe(
          Effect.catchTag("PushPayloadTooLarge", (e) =>
            Effect.as(
              Effect.andThen(
                count("payload_too_large"),
                Effect.sync(() => ledger.die(t.registration, e.message)),
              ),
              undefined,
            ),
          ),
        )
      if (request === undefined) return
      const result = yield* OutboundSender.send(request, config.policy, sendLimits, connections)
      const answered = yield* Clock.currentTimeMillis
      const verdict = PushOutcome.classify(result, answered)
      switch (verdict._tag) {
        case "Delivered":
          yield* Metric.update(PushMetrics.handoffLatency, (answered - event.occurredAt.getTime()) / 1000)
          yield* count("delivered")
          return ledger.settle(t.registration)
        case "Gone":
          yield* count("gone")
          yield* removeRegistration(t.registration)
          return ledger.settle(t.registration)
        case "Throttled":
          yield* count("throttled")
          return ledger.throttle(origin, t.registration, verdict.delay)
        case "Retry":
          yield* count("retried")
          return ledger.fail(t.registration, verdict.reason)
        case "Dead":
          if (verdict.outcome === "config_error") {
            const host = new URL(t.endpoint).host
            yield* configError(
              host,
              `push: ${host}: ${verdict.reason} (registration ${t.registration} kept; every push to it is likely refused; counted in bothy.push.deliveries{outcome="config_error"})`,
            )
          }
          yield* count(verdict.outcome)
          return ledger.die(t.registration, verdict.reason)
      }
    })

  /** One registration of the attempt, from its row to its settling (or not). */
  const deliverOne = (attempt: Attempt, t: Target) =>
    Effect.gen(function* () {
      const { ledger, event } = attempt
      if (t.endpoint === null) {
        yield* count("unregistered")
        ledger.settle(t.registration)
      } else if (attempt.rights.get(t.principal!) !== true) {
        yield* count("denied")
        ledger.die(t.registration, `${t.principal} lacks ${pushDeliver} on space ${event.space}`)
      } else {
        const origin = new URL(t.endpoint).origin
        const endpoint = t.endpoint
        yield* inFlight.withPermit(
          Effect.suspend(() => {
            if (attempt.progress.lost()) return Effect.void
            // Its push service asked this attempt to wait: the registration waits with it, unsent.
            if (ledger.isThrottled(origin))
              return Effect.sync(() => ledger.throttle(origin, t.registration, Duration.zero))
            return send(attempt, { ...t, endpoint }, origin)
          }),
        )
      }
      yield* attempt.progress.flush
    })

  /** Records the attempt's plan and ends it as the plan says. */
  const finish = (attempt: Attempt) =>
    Effect.gen(function* () {
      if (attempt.progress.lost()) return
      const left = yield* ttlLeft(attempt.event)
      const plan = attempt.ledger.plan(Duration.millis(Math.max(0, left)))
      const now = yield* Clock.currentTimeMillis
      if (plan.next._tag === "Snooze" || plan.next._tag === "Retry" || plan.split.length > 0) {
        const split = plan.split.map((s) => ({
          registrations: s.registrations,
          scheduledAt: new Date(now + Duration.toMillis(s.delay)),
        }))
        if (!(yield* attempt.progress.last(plan.keep, split))) return
      }
      switch (plan.next._tag) {
        case "Done":
          return
        case "Dead":
          return yield* new JobKind.JobCancel({ reason: plan.next.reason })
        case "Snooze":
          return yield* new JobKind.JobSnooze({ delay: plan.next.delay })
        case "Retry":
          return yield* new PushServiceUnavailable({ reason: plan.next.reason })
      }
    })

  const run = Effect.fn("PushDelivery.run")(function* (input: BatchArgs | DeliverArgs, job: JobKind.JobInfo) {
    const args = asBatch(input)
    if (args.registrations.length === 0) return
    const { event, targets } = yield* readTargets(sql, permissions, args)
    const expired = (reason: string) =>
      Effect.andThen(count("expired", targets.length), Effect.fail(new JobKind.JobCancel({ reason })))
    if (event === undefined) return yield* expired(`event ${args.seq} left the log before its push was sent`)
    if ((yield* ttlLeft(event)) <= 0) {
      return yield* expired(`the TTL (${Duration.format(config.ttl)}) passed before delivery`)
    }
    const rights = yield* rightsOf(targets, event.space)
    const ledger = new Ledger(args.registrations)
    const progress = yield* PushProgress.make(sql, job, args, ledger)
    const attempt: Attempt = { args, event, rights, ledger, progress }
    yield* Effect.forEach(targets, (t) => deliverOne(attempt, t), {
      concurrency: "unbounded",
      discard: true,
    }).pipe(Effect.onInterrupt(() => progress.lastWord))
    return yield* finish(attempt)
  })

  const timeout = "5 minutes"
  return {
    batch: JobKind.make({ kind: deliverKind, args: BatchArgs, run, timeout, retryDelay: PushSchedule.retryDelay }),
    legacy: JobKind.make({
      kind: legacyDeliverKind,
      args: LegacyArgs,
      run,
      timeout,
      retryDelay: PushSchedule.retryDelay,
    }),
  }
})

/** The batch kind alone, with the token cache's options (what the push benchmark runs). */
export const makeWith = (options: { readonly tokens?: PushVapid.TokenCacheOptions } = {}) =>
  Effect.map(makeKinds(options), (kinds) => kinds.batch)

/** The job kinds as the worker runs them: one VAPID token per push-service origin, reused. */
export const make = Effect.map(makeKinds(), (kinds) => [kinds.batch, kinds.legacy] as const)
