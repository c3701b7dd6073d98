/**
 * The push services on a fresh test database: a fresh VAPID key pair, http to loopback allowed and
 * any host pattern (the push services are local), the default audience and grants; and the `push`
 * consumer's round, run by hand so a test can act between round and job.
 */
import { randomBytes } from "node:crypto"
import { type Duration, Effect, Layer, Redacted, Result } from "effect"
import { SqlClient } from "effect/sql"
import * as PermissionGrants from "../../src/authz/PermissionGrants.ts"
import * as Consumer from "../../src/consumer/Consumer.ts"
import { Jobs } from "../../src/jobs/Jobs.ts"
import { EventLog } from "../../src/log/EventLog.ts"
import { NotificationStream } from "../../src/platform/NotificationStream.ts"
import * as PushAudience from "../../src/push/PushAudience.ts"
import { defaults, PushConfig, type PushSettings } from "../../src/push/PushConfig.ts"
import * as PushFanOut from "../../src/push/PushFanOut.ts"
import { deliverKind, legacyDeliverKind } from "../../src/push/PushJob.ts"
import * as PushVapid from "../../src/push/PushVapid.ts"
import * as PushService from "../../testkit/PushService.ts"
import * as TestDatabase from "./TestDatabase.ts"

export const subject = "mailto:push-tests@example.com"

/** A subscription as a browser's `toJSON()` gives it, on a loopback endpoint nobody listens on. */
export const unheardSubscription = () => ({
  endpoint: `http://127.0.0.1:9/push/${randomBytes(6).toString("hex")}`,
  keys: PushService.browserKeys().keys,
})

/** A fresh, checked VAPID key pair with the tests' subject. */
export const vapidKeys = (): PushVapid.VapidKeys => {
  const pair = PushVapid.generate()
  const checked = PushVapid.check({ ...pair, privateKey: Redacted.make(pair.privateKey), subject })
  if (Result.isFailure(checked)) throw new Error(checked.failure.message)
  return checked.success
}

export const settings = (overrides: Partial<PushSettings> = {}): PushSettings => ({
  vapid: vapidKeys(),
  policy: { allowHttpLoopback: true, allowCidrs: [], allowHosts: [] },
  hostPatterns: ["*"],
  ttl: defaults.ttl,
  registrationMaxAge: defaults.registrationMaxAge,
  maxInFlight: defaults.maxInFlight,
  ...overrides,
})

export const layer = (overrides: Partial<PushSettings> = {}) =>
  Layer.mergeAll(
    PermissionGrants.layer,
    PushAudience.layer,
    EventLog.layer,
    Jobs.layer,
    NotificationStream.layer(),
  ).pipe(Layer.provideMerge(PushConfig.layerWith(settings(overrides))), Layer.provideMerge(TestDatabase.layer()))

/** One round of the `push` consumer (the one-statement round when the audience answers in SQL). */
export const round = (batchSize = 10_000, ttl?: Duration.Duration) =>
  Effect.gen(function* () {
    const audience = yield* PushAudience.PushAudience
    const config = yield* PushConfig
    return yield* yield* Consumer.makeRound(
      PushFanOut.roundOptions(audience, ttl ?? config.ttl, batchSize, config.batchSize),
    )
  })

export interface PushJob {
  readonly id: string
  readonly kind: string
  /** The registrations its args name: a batch's left to send (as last recorded), or a single job's one. */
  readonly registrations: ReadonlyArray<string>
  /** The first of them. */
  readonly registration: string
  readonly seq: string
  readonly state: string
  readonly uniqueKey: string
  readonly errors: ReadonlyArray<{ readonly kind: string; readonly message: string }>
}

/** The push jobs (batches, and single jobs of earlier versions), in order of seq and first registration. */
export const jobs = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  return yield* sql<PushJob>`
    SELECT id::text AS id, kind, r.registrations, r.registrations ->> 0 AS registration, args ->> 'seq' AS seq,
           state::text AS state, unique_key AS "uniqueKey", errors
    FROM jobs CROSS JOIN LATERAL (
      SELECT coalesce(args -> 'registrations', jsonb_build_array(args -> 'registration')) AS registrations
    ) AS r
    WHERE kind IN (${deliverKind}, ${legacyDeliverKind})
    ORDER BY (args ->> 'seq')::bigint, (r.registrations ->> 0)::bigint, id`
})
