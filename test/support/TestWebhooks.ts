/**
 * The webhook services on a fresh test database, with a random sealing key and http to loopback
 * allowed (the receivers are local); and the `webhooks` consumer's round, run by hand.
 */
import { randomBytes } from "node:crypto"
import type { PgClient } from "@effect/sql-pg"
import { type Duration, Effect, Layer, Queue, Redacted, type Schema } from "effect"
import { SqlClient } from "effect/sql"
import * as PermissionGrants from "../../src/authz/PermissionGrants.ts"
import { webhookDeliver } from "../../src/authz/Permissions.ts"
import * as Consumer from "../../src/consumer/Consumer.ts"
import * as SecretBox from "../../src/crypto/SecretBox.ts"
import type { JobInfo } from "../../src/jobs/JobKind.ts"
import { Jobs } from "../../src/jobs/Jobs.ts"
import { EventLog } from "../../src/log/EventLog.ts"
import { NotificationStream } from "../../src/platform/NotificationStream.ts"
import { WebhookConfig } from "../../src/webhooks/WebhookConfig.ts"
import * as WebhookFanOut from "../../src/webhooks/WebhookFanOut.ts"
import { Webhooks } from "../../src/webhooks/Webhooks.ts"
import * as TestDatabase from "./TestDatabase.ts"

export const secretKey = () => Effect.runSync(SecretBox.parseKey(Redacted.make(randomBytes(32).toString("base64"))))

interface LayerOptions {
  readonly retrySteps?: ReadonlyArray<Duration.Duration>
  readonly pool?: Partial<PgClient.PgPoolConfig>
}

/** Everything but `Webhooks` (whose layer checks the sealing key against the schema), on `database`. */
const services = (database: ReturnType<typeof TestDatabase.layer>, options: LayerOptions) =>
  Layer.mergeAll(PermissionGrants.layer, EventLog.layer, Jobs.layer, NotificationStream.layer()).pipe(
    Layer.provideMerge(
      WebhookConfig.layerWith({
        secretKey: secretKey(),
        policy: { allowHttpLoopback: true, allowCidrs: [], allowHosts: [] },
        ...(options.retrySteps === undefined ? {} : { retrySteps: options.retrySteps }),
      }),
    ),
    Layer.provideMerge(database),
  )

export const layer = (options: LayerOptions = {}) =>
  Webhooks.layer.pipe(Layer.provideMerge(services(TestDatabase.layer(options.pool), options)))

/**
 * On a database with no schema yet, for tests of a migration, and without `Webhooks`: the test
 * builds it once it has migrated.
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

/** A subscription of `owner`, who holds `webhook_out.deliver` on every space of its scope. */
export const subscribe = (
  owner: string,
  url: string,
  scope: ReadonlyArray<string>,
  eventTypes: ReadonlyArray<string> = [],
) =>
  Effect.gen(function* () {
    for (const space of scope) yield* PermissionGrants.grant(owner, webhookDeliver, space)
    return yield* (yield* Webhooks).create({ owner, url, scope, eventTypes })
  })

/** Appends one event (`item.created` unless told) in `space` carrying `payload`, in a transaction of its own. */
export const append = (space: string, payload: Schema.Json = {}, type = "item.created") =>
  Effect.flatMap(EventLog, (log) =>
    Effect.flatMap(log.append([{ space, type, actor: "tester", payload }]), log.sequenced),
  )

/**
 * The drain job a round created for `subscriptionId`, as the job runtime hands it to the kind, for
 * tests that run the kind by hand (the same job id each time, so a run keeps the slot).
 */
export const drainJob = (subscriptionId: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql<{ id: bigint }>`SELECT id FROM jobs WHERE args->>'subscription' = ${subscriptionId}`,
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
