/**
 * The stored registrations of the three kinds: register a browser (checked by
 * `PushRegistration.check` against the configured policy and host patterns) or a native app's
 * device (`NativeRegistration`), list, remove, and the sweep of the ones nobody refreshed.
 *
 * One row per endpoint, or per (kind, token) for a device: registering it again refreshes its row,
 * under the principal who registered it last (a browser's subscription, or a phone, follows
 * whoever signs in there). The sweep is the
 * only cleanup some registrations ever get: a few push services answer 2xx for a subscription the
 * user revoked, so status codes alone never remove it.
 */
import { Duration, Effect, Layer, Metric, Schedule, Schema } from "effect"
import { SqlClient } from "effect/sql"
import * as SqlInterval from "../platform/SqlInterval.ts"
import { storableCheck } from "../platform/StorableText.ts"
import * as NativeRegistration from "./NativeRegistration.ts"
import { PushConfig } from "./PushConfig.ts"
import * as PushMetrics from "./PushMetrics.ts"
import { check, InvalidPushRegistration } from "./PushRegistration.ts"

/** A principal as events and grants name one. */
const Principal = Schema.String.check(Schema.isNonEmpty(), Schema.isMaxLength(200), storableCheck)

export interface Registered {
  readonly id: string
  /** `false` when the endpoint was registered already and this refreshed it. */
  readonly created: boolean
}

export interface StoredRegistration {
  readonly id: string
  readonly principal: string
  readonly kind: NativeRegistration.Kind
  /** A browser's endpoint; `null` for a device. */
  readonly endpoint: string | null
  /** A device's token; `null` for a browser. */
  readonly token: string | null
  /** An APNs device's bundle id. */
  readonly topic: string | null
  /** An APNs device's environment. */
  readonly environment: NativeRegistration.Environment | null
  readonly createdAt: Date
  readonly refreshedAt: Date
}

const selectStored = (sql: SqlClient.SqlClient) => sql`
  SELECT id::text AS id, principal, kind, endpoint, token, topic, environment,
         created_at AS "createdAt", refreshed_at AS "refreshedAt"
  FROM push_registrations`

const base64url = (bytes: Uint8Array) => Buffer.from(bytes).toString("base64url")

/**
 * How many registrations there are; `null` on a database without the table (push not migrated
 * yet): `to_regclass` makes its absence an answer, not an error.
 */
export const count = (sql: SqlClient.SqlClient) =>
  Effect.gen(function* () {
    const [exists] = yield* sql<{ present: boolean }>`
      SELECT to_regclass('push_registrations') IS NOT NULL AS present`
    if (exists?.present !== true) return null
    const [row] = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM push_registrations`
    return row?.n ?? 0
  })

const checkPrincipal = (principal: string) =>
  Schema.decodeUnknownEffect(Principal)(principal).pipe(
    Effect.mapError(
      () =>
        new InvalidPushRegistration({
          field: "principal",
          reason: "BadShape",
          detail: "expected a non-empty principal of at most 200 characters",
        }),
    ),
  )

/** Registers `subscription` (a `PushSubscription.toJSON()` value) for `principal`, or refreshes it. */
export const register = Effect.fn("PushRegistrations.register")(function* (principal: string, subscription: unknown) {
  const config = yield* PushConfig
  yield* checkPrincipal(principal)
  const checked = yield* check(subscription, config.policy, config.hostPatterns)
  const sql = yield* SqlClient.SqlClient
  const rows = yield* sql<{ id: string; created: boolean }>`
    INSERT INTO push_registrations (principal, endpoint, p256dh, auth)
    VALUES (${principal}, ${checked.endpoint.href}, ${base64url(checked.p256dh)}, ${base64url(checked.auth)})
    ON CONFLICT (endpoint) DO UPDATE
      SET principal = excluded.principal, p256dh = excluded.p256dh, auth = excluded.auth,
          refreshed_at = clock_timestamp()
    RETURNING id::text AS id, (xmax = 0) AS created`
  return rows[0]! satisfies Registered
})

/**
 * Registers a native app's device for `principal`, or refreshes it: `{ token, topic, environment }`
 * for `apns`, `{ token }` for `fcm`. A device needs no push configuration to be registered (the
 * credentials are the workers'); one whose provider a worker has no credentials for is kept, and
 * its messages are counted as configuration errors.
 */
export const registerNative = Effect.fn("PushRegistrations.registerNative")(function* (
  principal: string,
  kind: NativeRegistration.NativeKind,
  device: unknown,
) {
  yield* checkPrincipal(principal)
  const checked =
    kind === "apns" ? yield* NativeRegistration.checkApns(device) : yield* NativeRegistration.checkFcm(device)
  const topic = checked.kind === "apns" ? checked.topic : null
  const environment = checked.kind === "apns" ? checked.environment : null
  const sql = yield* SqlClient.SqlClient
  const rows = yield* sql<{ id: string; created: boolean }>`
    INSERT INTO push_registrations (principal, kind, token, topic, environment)
    VALUES (${principal}, ${checked.kind}, ${checked.token}, ${topic}, ${environment})
    ON CONFLICT (kind, token) DO UPDATE
      SET principal = excluded.principal, topic = excluded.topic, environment = excluded.environment,
          refreshed_at = clock_timestamp()
    RETURNING id::text AS id, (xmax = 0) AS created`
  return rows[0]! satisfies Registered
})

/** The registrations of `principal`, newest first. */
export const list = Effect.fn("PushRegistrations.list")(function* (principal: string) {
  const sql = yield* SqlClient.SqlClient
  return yield* sql<StoredRegistration>`${selectStored(sql)} WHERE principal = ${principal} ORDER BY id DESC`
})

export class RegistrationNotFound extends Schema.TaggedError<RegistrationNotFound>()("RegistrationNotFound", {
  id: Schema.String,
}) {
  override get message() {
    return `no push registration ${this.id}`
  }
}

/** The largest int8: a larger id names no row, and binding it would be an SQL error. */
const maxId = 2n ** 63n - 1n

const idOf = (id: string) =>
  /^[1-9]\d{0,18}$/.test(id) && BigInt(id) <= maxId ? Effect.succeed(id) : Effect.fail(new RegistrationNotFound({ id }))

/** One registration by its id. */
export const get = Effect.fn("PushRegistrations.get")(function* (id: string) {
  const sql = yield* SqlClient.SqlClient
  const [row] = yield* sql<StoredRegistration>`${selectStored(sql)} WHERE id = ${yield* idOf(id)}::bigint`
  if (row === undefined) return yield* new RegistrationNotFound({ id })
  return row
})

/** Removes the registration `id` (an operator's or its principal's request). */
export const remove = Effect.fn("PushRegistrations.remove")(function* (id: string) {
  const sql = yield* SqlClient.SqlClient
  const rows = yield* sql`DELETE FROM push_registrations WHERE id = ${yield* idOf(id)}::bigint RETURNING id`
  if (rows.length === 0) return yield* new RegistrationNotFound({ id })
})

/** Removes the registration of `endpoint` (a browser unsubscribed); whether there was one. */
export const unregister = Effect.fn("PushRegistrations.unregister")(function* (endpoint: string) {
  const sql = yield* SqlClient.SqlClient
  const href = URL.canParse(endpoint) ? new URL(endpoint).href : endpoint
  const rows = yield* sql`DELETE FROM push_registrations WHERE endpoint = ${href} RETURNING id`
  return rows.length > 0
})

/**
 * Removes registration `id` because its push service or provider said it is gone (counted, as
 * `cause="gone"`); nothing when it was removed already.
 */
export const removeGone = (sql: SqlClient.SqlClient, id: string, why: string) =>
  Effect.gen(function* () {
    const gone = yield* sql`DELETE FROM push_registrations WHERE id = ${id}::bigint RETURNING id`
    if (gone.length > 0) {
      yield* Metric.update(Metric.withAttributes(PushMetrics.registrationsRemoved, { cause: "gone" }), 1)
      yield* Effect.logInfo(`push: registration ${id} removed: ${why}`)
    }
  })

/** Removes the registrations not refreshed for `maxAge` (by the database's clock, which wrote `refreshed_at`). */
export const removeStale = Effect.fn("PushRegistrations.removeStale")(function* (maxAge: Duration.Duration) {
  const sql = yield* SqlClient.SqlClient
  const rows = yield* sql<{ n: number }>`
    WITH gone AS (
      DELETE FROM push_registrations
      WHERE refreshed_at < clock_timestamp() - ${SqlInterval.millis(sql, Duration.toMillis(maxAge))}
      RETURNING 1
    )
    SELECT count(*)::int AS n FROM gone`
  const removed = rows[0]?.n ?? 0
  if (removed > 0) {
    yield* Metric.update(Metric.withAttributes(PushMetrics.registrationsRemoved, { cause: "stale" }), removed)
    yield* Effect.logInfo(
      `push: removed ${removed} registrations not refreshed for ${Duration.format(maxAge)} (push.registration_max_age)`,
    )
  }
  return removed
})

/** How often the worker sweeps stale registrations. */
export const sweepInterval = Duration.hours(1)

/**
 * Sweeps stale registrations at start and every `sweepInterval` (by `Clock`), for as long as the
 * layer lives; `onSwept` hears how many each sweep removed (tests wait on it).
 */
export const sweepWith = (options: { readonly onSwept?: (removed: number) => Effect.Effect<void> } = {}) =>
  Layer.effectDiscard(
    Effect.gen(function* () {
      const { registrationMaxAge } = yield* PushConfig
      yield* removeStale(registrationMaxAge).pipe(
        Effect.tap((removed) => options.onSwept?.(removed) ?? Effect.void),
        Effect.catchCause((cause) => Effect.logError("push: the sweep of stale registrations failed", cause)),
        Effect.repeat(Schedule.spaced(sweepInterval)),
        Effect.forkScoped,
      )
    }),
  )

export const sweep = sweepWith()
