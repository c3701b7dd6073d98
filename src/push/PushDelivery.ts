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
 * Exactly once per registration: while the batch runs (after its first `PushProgress.quietStart`),
 * what has settled is written to the job's args (`JobProgress`) one write at a time, the next write
 * starting as the last one ends, so that an attempt after a crash sends only to what no write
 * recorded; once every registration settled, the job's outcome is that record; an interrupted
 * attempt (timeout, fence, shutdown) writes what it knows before it ends. What a crash leaves
 * unrecorded (sent, its answer not yet written) is sent again with the same idempotency key
 * (`PushMessageKey`: the `Topic` header, the envelope's `id` and `tag`), which a device drops. The TTL header is what is left of the TTL since the
 * event's commit, so a retried message never outlives the first one's deadline.
 */
import { Clock, Duration, Effect, Schema, Semaphore } from "effect"
import { SqlClient } from "effect/sql"
import { Permissions, pushDeliver } from "../authz/Permissions.ts"
import * as JobKind from "../jobs/JobKind.ts"
import * as EventLogLeaf from "../log/EventLogLeaf.ts"
import * as NativeSend from "./NativeSend.ts"
import { Ledger } from "./PushBatch.ts"
import { PushConfig } from "./PushConfig.ts"
import type * as PushEncryption from "./PushEncryption.ts"
import { asBatch, BatchArgs, type DeliverArgs, deliverKind, LegacyArgs, legacyDeliverKind } from "./PushJob.ts"
import * as PushMetrics from "./PushMetrics.ts"
import * as PushProgress from "./PushProgress.ts"
import * as PushSchedule from "./PushSchedule.ts"
import * as PushSend from "./PushSend.ts"
import { readTargets, type Target } from "./PushTargets.ts"
import type * as PushVapid from "./PushVapid.ts"

/** A retry's reason, kept on the job row: short, since a message may be retried for a whole day. */
export class PushServiceUnavailable extends Schema.TaggedError<PushServiceUnavailable>()("PushServiceUnavailable", {
  reason: Schema.String,
}) {
  override get message() {
    return this.reason
  }
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
  const { prepare, send, ttlLeft } = yield* PushSend.make(options)
  const native = yield* NativeSend.make(ttlLeft)
  const inFlight = yield* Semaphore.make(config.maxInFlight)
  const leaves = new EventLogLeaf.Leaves()

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

  /** One registration of the attempt, from its row to its settling (or not). */
  const deliverOne = (attempt: PushSend.Attempt, t: Target, build: PushEncryption.Build | undefined) =>
    Effect.gen(function* () {
      const { ledger, event } = attempt
      if (t.kind === null) {
        yield* PushMetrics.count("unregistered")
        ledger.settle(t.registration)
      } else if (attempt.rights.get(t.principal!) !== true) {
        yield* PushMetrics.count("denied")
        ledger.die(t.registration, `${t.principal} lacks ${pushDeliver} on space ${event.space}`)
      } else {
        const device = t.kind === "webpush" || t.token === null ? undefined : { ...t, kind: t.kind, token: t.token }
        const origin = device === undefined ? new URL(t.endpoint!).origin : NativeSend.throttleKey(device)
        yield* inFlight.withPermit(
          Effect.suspend(() => {
            if (attempt.progress.lost()) return Effect.void
            // Its push service asked this attempt to wait: the registration waits with it, unsent.
            if (ledger.isThrottled(origin))
              return Effect.sync(() => ledger.throttle(origin, t.registration, Duration.zero))
            if (device !== undefined) return native.send(attempt, device)
            // `prepare` built one for every Web Push registration with the right.
            if (build === undefined) return Effect.die(new Error(`push: no request built for ${t.registration}`))
            return send(attempt, { ...t, endpoint: t.endpoint! }, origin, build)
          }),
        )
      }
      yield* attempt.progress.flush
    })

  /** Records the attempt's plan and ends it as the plan says. */
  const finish = (attempt: PushSend.Attempt) =>
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

  // Scoped to the attempt: a progress timer (`PushProgress.quietStart`) never outlives it.
  const run = Effect.fn("PushDelivery.run")(function* (input: BatchArgs | DeliverArgs, job: JobKind.JobInfo) {
    const args = asBatch(input)
    if (args.registrations.length === 0) {
      // An attempt that settled every registration and then stopped short of ending the job.
      const plan = new Ledger([], args.dead).plan(Duration.zero)
      return plan.next._tag === "Dead" ? yield* new JobKind.JobCancel({ reason: plan.next.reason }) : undefined
    }
    const { event, targets } = yield* readTargets(sql, permissions, leaves, args)
    const expired = (reason: string) =>
      Effect.andThen(PushMetrics.count("expired", targets.length), Effect.fail(new JobKind.JobCancel({ reason })))
    if (event === undefined) return yield* expired(`event ${args.seq} left the log before its push was sent`)
    if ((yield* ttlLeft(event)) <= 0) {
      return yield* expired(`the TTL (${Duration.format(config.ttl)}) passed before delivery`)
    }
    const rights = yield* rightsOf(targets, event.space)
    const ledger = new Ledger(args.registrations, args.dead)
    const progress = yield* PushProgress.make(sql, job, args, ledger)
    const attempt: PushSend.Attempt = { args, event, rights, ledger, progress }
    const sendable = targets.flatMap(
      (t): Array<PushSend.Sendable> =>
        t.kind === "webpush" && t.endpoint !== null && rights.get(t.principal!) === true
          ? [{ ...t, endpoint: t.endpoint }]
          : [],
    )
    const built = yield* prepare(attempt, sendable)
    yield* Effect.forEach(targets, (t) => deliverOne(attempt, t, built.get(t.registration)), {
      concurrency: "unbounded",
      discard: true,
    }).pipe(Effect.onInterrupt(() => progress.lastWord))
    return yield* finish(attempt)
  }, Effect.scoped)

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
