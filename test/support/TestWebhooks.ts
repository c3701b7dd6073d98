/**
 * The webhook services on a fresh test database, with a random sealing key and http to loopback
 * allowed (the receivers are local); and the `webhooks` consumer's round, run by hand.
 */
import { randomBytes } from "node:crypto"
import { PgClient } from "@effect/sql-pg"
import { type Duration, Effect, Layer, Queue, Redacted, type Schema } from "effect"
import { SqlClient } from "effect/sql"
import * as PermissionGrants from "../../src/authz/PermissionGrants.ts"
import { webhookDeliver } from "../../src/authz/Permissions.ts"
import * as Consumer from "../../src/consumer/Consumer.ts"
import * as SecretBox from "../../src/crypto/SecretBox.ts"
import type { JobInfo } from "../../src/jobs/JobKind.ts"
import { Jobs } from "../../src/jobs/Jobs.ts"
import * as JobWorker from "../../src/jobs/JobWorker.ts"
import { EventLog, timeOf } from "../../src/log/EventLog.ts"
import { NotificationStream } from "../../src/platform/NotificationStream.ts"
import * as WebhookDrainer from "../../src/webhooks/drain/WebhookDrainer.ts"
import type { Filter } from "../../src/webhooks/subscriptions/PayloadFilter.ts"
import type { HealthSettings } from "../../src/webhooks/subscriptions/SubscriptionHealth.ts"
import { WebhookSubscriptions } from "../../src/webhooks/subscriptions/WebhookSubscriptions.ts"
import { WebhookConfig } from "../../src/webhooks/WebhookConfig.ts"
import * as WebhookFanOut from "../../src/webhooks/WebhookFanOut.ts"
import * as TestDatabase from "./TestDatabase.ts"

export const secretKey = () => Effect.runSync(SecretBox.parseKey(Redacted.make(randomBytes(32).toString("base64"))))

interface LayerOptions {
  readonly retrySteps?: ReadonlyArray<Duration.Duration>
  /**
   * The sealing key, or its base64 text (default: a random one); a worker process on the same
   * database needs it too.
   */
  readonly secretKey?: SecretBox.SecretKey | string
  /** `webhook.traceparent`: send the W3C header. */
  readonly traceparent?: boolean
  /** When a subscription is degraded (`webhook.degraded_*`); default the product's. */
  readonly health?: HealthSettings
  readonly pool?: Partial<PgClient.PgPoolConfig>
}

/**
 * Everything but `WebhookSubscriptions` (whose layer checks the sealing key against the schema),
 * on `database`.
 */
const services = (database: ReturnType<typeof TestDatabase.layer>, options: LayerOptions) =>
  Layer.mergeAll(PermissionGrants.layer, EventLog.layer, Jobs.layer, NotificationStream.layer()).pipe(
    Layer.provideMerge(
      WebhookConfig.layerWith({
        secretKey:
          options.secretKey === undefined
            ? secretKey()
            : typeof options.secretKey === "string"
              ? Effect.runSync(SecretBox.parseKey(Redacted.make(options.secretKey)))
              : options.secretKey,
        policy: { allowHttpLoopback: true, allowCidrs: [], allowHosts: [] },
        ...(options.retrySteps === undefined ? {} : { retrySteps: options.retrySteps }),
        ...(options.traceparent === undefined ? {} : { traceparent: options.traceparent }),
        ...(options.health === undefined ? {} : { health: options.health }),
      }),
    ),
    Layer.provideMerge(database),
  )

export const layer = (options: LayerOptions = {}) =>
  WebhookSubscriptions.layer.pipe(Layer.provideMerge(services(TestDatabase.layer(options.pool), options)))

/** What `layer` provides. */
export type Services = Layer.Success<ReturnType<typeof layer>>

/**
 * On the existing database `name` (which the test creates and drops itself: a restore drops and
 * re-creates it), with the same `secretKey` each time; as the superuser, or at `url` (another role).
 */
export const layerAt = (
  name: string,
  options: LayerOptions & { readonly secretKey: SecretBox.SecretKey; readonly url?: string },
) => {
  const pool =
    options.url === undefined
      ? TestDatabase.codePool(name, options.pool)
      : PgClient.layer({ url: Redacted.make(options.url), maxConnections: 10, ...options.pool })
  const url = options.url ?? TestDatabase.codeUrl(name)
  const database = Layer.merge(
    pool,
    Layer.succeed(
      TestDatabase.TestDatabase,
      TestDatabase.TestDatabase.of({ name, url, directUrl: options.url ?? TestDatabase.directUrl(name) }),
    ),
  ).pipe(Layer.orDie)
  return WebhookSubscriptions.layer.pipe(Layer.provideMerge(services(database, options)))
}

/**
 * On a database with no schema yet, for tests of a migration, and without `WebhookSubscriptions`:
 * the test builds it once it has migrated.
 */
export const layerEmpty = (options: LayerOptions = {}) => services(TestDatabase.layerEmpty(options.pool), options)

/** One round of the `webhooks` consumer, run by hand so a test can act between round and job. */
export const round = (batchSize = 10_000) =>
  Effect.flatMap(Consumer.makeRound(WebhookFanOut.roundOptions({ batchSize })), (r) => r)

/**
 * Wake-ups for tests that wait on drainers: pass `onRecorded` to the drain job
 * (`DrainOptions.onRecorded`) and `onFinalized` to the job worker; `until(condition)` checks the
 * condition after each of their signals (and once at first) until it holds, so nothing sleeps and
 * no signal between a check and the wait is missed. It fails after `timeout`, a guard against a
 * hang, not a speed target.
 */
export const signals = Effect.gen(function* () {
  const wakes = yield* Queue.unbounded<void>()
  const poke = () => Queue.offer(wakes, undefined).pipe(Effect.asVoid)
  const until = <E, R>(condition: Effect.Effect<boolean, E, R>, timeout: Duration.Input = "60 seconds") =>
    Effect.gen(function* () {
      while (!(yield* condition)) {
        yield* Queue.take(wakes)
        yield* Queue.clear(wakes)
      }
    }).pipe(Effect.timeout(timeout))
  return { onRecorded: poke, onFinalized: poke, until }
})

export type Signals = Effect.Success<typeof signals>

/**
 * Drain jobs on queue `webhooks` for the rest of the scope; their records and outcomes wake `signals`.
 * `kinds` run on the same queue beside them, as the worker runs them (`DeliveryResend.make`,
 * `BulkRecovery.make`), so a test of a recovery needs no worker of its own.
 */
export const startDrainers = (
  signals: Signals,
  options: {
    readonly concurrency?: number
    readonly pollInterval?: Duration.Input
    readonly kinds?: JobWorker.JobWorkerOptions<never>["kinds"]
  } = {},
) =>
  Effect.gen(function* () {
    const kind = yield* WebhookDrainer.makeWith({ onRecorded: signals.onRecorded })
    yield* Layer.build(
      JobWorker.layer({
        kinds: [kind, ...(options.kinds ?? [])],
        queues: { webhooks: { concurrency: options.concurrency ?? 4 } },
        pollInterval: options.pollInterval ?? "50 millis",
        onFinalized: signals.onFinalized,
      }),
    )
  })

/** A subscription of `owner`, who holds `webhook_out.deliver` on every space of its scope. */
export const subscribe = (
  owner: string,
  url: string,
  scope: ReadonlyArray<string>,
  eventTypes: ReadonlyArray<string> = [],
  filter?: Filter,
) =>
  Effect.gen(function* () {
    for (const space of scope) yield* PermissionGrants.grant(owner, webhookDeliver, space)
    return yield* (yield* WebhookSubscriptions).create({
      owner,
      url,
      scope,
      eventTypes,
      ...(filter === undefined ? {} : { filter: filter as Schema.Json }),
    })
  })

/** Appends one event (`item.created` unless told) in `space` carrying `payload`, in a transaction of its own. */
export const append = (space: string, payload: Schema.Json = {}, type = "item.created") =>
  Effect.flatMap(EventLog, (log) =>
    Effect.flatMap(log.append([{ space, type, actor: "tester", payload }]), log.sequenced),
  )

/**
 * The drain job the latest round created for `subscriptionId`, as the job runtime hands it to the kind, for
 * tests that run the kind by hand (the same job id each time, so a run keeps the slot).
 */
export const drainJob = (subscriptionId: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql<{ id: bigint }>`
      SELECT id FROM jobs WHERE args->>'subscription' = ${subscriptionId} ORDER BY id DESC LIMIT 1`,
  ).pipe(
    Effect.map(
      ([job]): JobInfo => ({
        id: job!.id,
        kind: WebhookFanOut.deliverKind,
        queue: WebhookFanOut.queue,
        attempt: 1,
        maxAttempts: WebhookFanOut.maxAttempts,
        createdAt: new Date(),
      }),
    ),
  )

/**
 * Runs the subscription's drain job by hand once, as the job runtime would (same job id each
 * time, so it keeps the slot): `done` when it finished, `snoozed` when it asks to run again.
 * Pass the same `kind` each time to keep what it holds across runs (its endpoints' tokens).
 */
export const drainOnce = (kind: Effect.Success<ReturnType<typeof WebhookDrainer.makeWith>>, subscriptionId: string) =>
  Effect.flatMap(drainJob(subscriptionId), (info) =>
    kind.run({ subscription: subscriptionId }, info).pipe(
      Effect.as("done" as const),
      Effect.catchTag("JobSnooze", () => Effect.succeed("snoozed" as const)),
    ),
  ).pipe(Effect.scoped)

/** The envelope a receiver got, for tests whose events carry a number `i` in their payload. */
export interface Envelope {
  readonly epoch: number
  readonly sequence: number
  readonly data: { readonly i: number }
}

export const envelope = (r: { readonly body: string }) => JSON.parse(r.body) as Envelope

/** The subscription's deliveries in seq order, with the `i` of their event (null once it left the log). */
export const deliveries = (subscriptionId: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql<{
      i: number | null
      state: string
      deadReason: string | null
      sequence: bigint | null
      attempts: number
    }>`
      SELECT (e.payload->>'i')::int AS i, d.state, d.dead_reason AS "deadReason", d.sequence, d.attempts
      FROM webhook_deliveries AS d LEFT JOIN event_log AS e ON e.seq = d.event_seq AND ${timeOf(sql, sql`d.event_at`)}
      WHERE d.subscription_id = ${subscriptionId}::uuid ORDER BY d.event_seq`,
  )

/** Waits until nothing of the subscription is pending and the event numbered `i` is delivered. */
export const deliveredThrough = (signals: Signals, subscriptionId: string, i: number) =>
  signals.until(
    Effect.map(
      deliveries(subscriptionId),
      (rows) => rows.every((d) => d.state !== "pending") && rows.some((d) => d.i === i && d.state === "delivered"),
    ),
  )
