/**
 * The `push.deliver` job: one Web Push message for one (registration, event), on every attempt:
 *
 *   read the registration, the event and, when `Permissions` answers in SQL, the right (one statement)
 *     registration gone ──> done (nothing to send to)
 *     event gone from the log, or older than the TTL ──> dead (expired): the push service would drop it
 *     no `push.deliver` right on the event's space ──> dead (denied), no request
 *   build the request (`PushRequest`: aes128gcm, on a `PushEncryption` thread; the VAPID token of the push service's origin)
 *   POST it through the shared checked connections (`PushConnections`: HTTP/2 per push service when it speaks it)
 *   act on `PushOutcome.classify`: delivered; gone ──> remove the registration; 429 ──> snooze for
 *   `Retry-After`; 5xx or network ──> fail (retried by `PushSchedule`); dead ──> cancelled, counted
 *
 * The TTL header is what is left of the TTL since the event's commit, so a retried message never
 * outlives the first one's deadline. Every attempt carries the message's idempotency key
 * (`PushMessageKey`: the `Topic` header, the envelope's `id` and `tag`), so a copy sent again after
 * a worker died mid-send (its lease lapsed, the job was rescued) is one a device can drop.
 */
import { Clock, Duration, Effect, Metric, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { Permissions, type PermissionsShape, pushDeliver } from "../authz/Permissions.ts"
import * as JobKind from "../jobs/JobKind.ts"
import * as EventLog from "../log/EventLog.ts"
import * as OutboundSender from "../outbound/OutboundSender.ts"
import * as ThrottledWarnings from "../platform/ThrottledWarnings.ts"
import { defaults, PushConfig } from "./PushConfig.ts"
import * as PushConnections from "./PushConnections.ts"
import * as PushEncryption from "./PushEncryption.ts"
import * as PushEnvelope from "./PushEnvelope.ts"
import { DeliverArgs, deliverKind } from "./PushJob.ts"
import * as PushMessageKey from "./PushMessageKey.ts"
import * as PushMetrics from "./PushMetrics.ts"
import * as PushOutcome from "./PushOutcome.ts"
import * as PushSchedule from "./PushSchedule.ts"
import * as PushVapid from "./PushVapid.ts"

/** A retry's reason, kept on the job row: short, since a message may be retried for a whole day. */
export class PushServiceUnavailable extends Schema.TaggedError<PushServiceUnavailable>()("PushServiceUnavailable", {
  reason: Schema.String,
}) {
  override get message() {
    return this.reason
  }
}

interface Target {
  readonly registered: boolean
  readonly principal: string | null
  readonly endpoint: string | null
  readonly p256dh: string | null
  readonly auth: string | null
  readonly space: string | null
  readonly type: string | null
  readonly epoch: number | null
  readonly occurredAt: Date | null
  readonly summary: string | null
  /** `null` when `Permissions` does not answer in SQL (or nothing to ask about). */
  readonly allowed: boolean | null
}

/**
 * The registration and the event of one message, and the right when `Permissions` answers in SQL,
 * in one statement. The event's time travels in the job (`at`): its millisecond's bounds go in as
 * parameters (`EventLog.atTime`), so PostgreSQL prunes the log to one hour leaf while it plans,
 * the first execution on a connection as every later one (a bound computed in SQL from the
 * parameter, `date_trunc`, is a stable function, which the planner does not fold: it set up every
 * leaf of the log for each custom plan, hundreds of milliseconds on a cold connection).
 * @internal
 */
export const readTarget = (sql: SqlClient.SqlClient, permissions: PermissionsShape, args: DeliverArgs) => {
  const allowed =
    permissions.inSql === undefined
      ? sql`NULL::boolean`
      : sql`CASE WHEN r.id IS NOT NULL AND e.seq IS NOT NULL
                 THEN ${permissions.inSql({ principal: sql`r.principal`, spaceId: sql`e.space_id` }, pushDeliver)} END`
  const at = args.at === undefined ? undefined : new Date(args.at)
  return sql<Target>`
    SELECT r.id IS NOT NULL AS registered, r.principal, r.endpoint, r.p256dh, r.auth,
           e.space_id AS space, e.type, e.epoch, e.occurred_at AS "occurredAt",
           CASE WHEN jsonb_typeof(e.payload -> 'summary') = 'string' THEN left(e.payload ->> 'summary', 1000) END AS summary,
           ${allowed} AS allowed
    FROM (SELECT ${args.seq}::bigint AS seq, ${args.registration}::bigint AS registration) AS k
    LEFT JOIN ${EventLog.eventAtTime(sql, sql`k.seq`, at)}
    LEFT JOIN push_registrations AS r ON r.id = k.registration`.pipe(Effect.map((rows) => rows[0]!))
}

/** Limits of one push request: push services answer fast, and a message is small. */
export const sendLimits: Partial<OutboundSender.SendLimits> = {
  connectTimeout: "5 seconds",
  totalTimeout: "10 seconds",
  maxRequestBytes: 8 * 1024,
  maxResponseBytes: 2000,
}

type Outcome = (typeof PushMetrics.deliveryOutcomes)[number]

const count = (outcome: Outcome) => Metric.update(Metric.withAttributes(PushMetrics.deliveries, { outcome }), 1)

const dead = (outcome: Outcome, reason: string) =>
  Effect.andThen(count(outcome), Effect.fail(new JobKind.JobCancel({ reason })))

/**
 * The job kind, with the VAPID token cache's options (`PushVapid.TokenCacheOptions`): the default
 * reuses a token per push-service origin; `{ signEach: true }` is the baseline the push benchmark
 * prices that reuse against.
 */
export const makeWith = Effect.fnUntraced(function* (options: { readonly tokens?: PushVapid.TokenCacheOptions } = {}) {
  yield* PushMetrics.atZero
  const config = yield* PushConfig
  const permissions = yield* Permissions
  const sql = yield* SqlClient.SqlClient
  const tokens = yield* PushVapid.makeTokenCache(config.vapid, options.tokens)
  const connections = yield* PushConnections.make(config, sendLimits)
  const encryption = yield* PushEncryption.make(config.encryptionThreads ?? defaults.encryptionThreads)
  const ttlMillis = Duration.toMillis(config.ttl)
  // Once a minute per push service: a wrong VAPID key fails every message to it.
  const configError = ThrottledWarnings.make("1 minute", Effect.logError)

  const read = (args: DeliverArgs) => readTarget(sql, permissions, args)

  const removeRegistration = (id: string) =>
    Effect.gen(function* () {
      const gone = yield* sql`DELETE FROM push_registrations WHERE id = ${id}::bigint RETURNING id`
      if (gone.length > 0) {
        yield* Metric.update(Metric.withAttributes(PushMetrics.registrationsRemoved, { cause: "gone" }), 1)
        yield* Effect.logInfo(`push: registration ${id} removed: its push service says it is gone`)
      }
    })

  const run = Effect.fn("PushDelivery.run")(function* (args: DeliverArgs) {
    const t = yield* read(args)
    if (!t.registered) return yield* count("unregistered")
    if (t.occurredAt === null || t.space === null || t.type === null || t.epoch === null) {
      return yield* dead("expired", `event ${args.seq} left the log before its push was sent`)
    }
    const now = yield* Clock.currentTimeMillis
    const left = ttlMillis - (now - t.occurredAt.getTime())
    if (left <= 0) return yield* dead("expired", `the TTL (${Duration.format(config.ttl)}) passed before delivery`)
    const allowed = t.allowed ?? (yield* permissions.allowed(t.principal!, pushDeliver, t.space))
    if (!allowed) return yield* dead("denied", `${t.principal} lacks ${pushDeliver} on space ${t.space}`)

    const endpoint = t.endpoint!
    const key = PushMessageKey.make(t.epoch, args.registration, BigInt(args.seq))
    const payload = PushEnvelope.body({
      key,
      type: t.type,
      space: t.space,
      epoch: t.epoch,
      seq: BigInt(args.seq),
      occurredAt: t.occurredAt,
      summary: t.summary,
    })
    const request = yield* encryption
      .build({
        endpoint,
        p256dh: t.p256dh!,
        auth: t.auth!,
        payload,
        ttlSeconds: Math.ceil(left / 1000),
        urgency: "normal",
        topic: PushMessageKey.topic(key),
        authorization: yield* tokens.authorization(new URL(endpoint).origin),
      })
      .pipe(Effect.catchTag("PushPayloadTooLarge", (e) => dead("payload_too_large", e.message)))
    const result = yield* OutboundSender.send(request, config.policy, sendLimits, connections)
    const answered = yield* Clock.currentTimeMillis
    const verdict = PushOutcome.classify(result, answered)
    switch (verdict._tag) {
      case "Delivered":
        yield* Metric.update(PushMetrics.handoffLatency, (answered - t.occurredAt.getTime()) / 1000)
        return yield* count("delivered")
      case "Gone":
        yield* count("gone")
        return yield* removeRegistration(args.registration)
      case "Throttled":
        yield* count("throttled")
        return yield* new JobKind.JobSnooze({ delay: Duration.min(verdict.delay, Duration.millis(left)) })
      case "Retry":
        yield* count("retried")
        return yield* new PushServiceUnavailable({ reason: verdict.reason })
      case "Dead":
        if (verdict.outcome === "config_error") {
          const host = new URL(endpoint).host
          yield* configError(
            host,
            `push: ${host}: ${verdict.reason} (registration ${args.registration} kept; every push to it is likely refused; counted in bothy.push.deliveries{outcome="config_error"})`,
          )
        }
        return yield* dead(verdict.outcome, verdict.reason)
    }
  })

  return JobKind.make({
    kind: deliverKind,
    args: DeliverArgs,
    run,
    timeout: "30 seconds",
    retryDelay: PushSchedule.retryDelay,
  })
})

/** The job kind as the worker runs it: one VAPID token per push-service origin, reused. */
export const make = makeWith()
