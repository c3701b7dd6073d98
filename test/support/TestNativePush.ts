/**
 * A world for native push tests: an APNs fake and an FCM fake started in the test's scope, the key
 * and service account they verify with, the push settings that point a worker at them, and
 * members whose devices are registered.
 */
import { createPrivateKey } from "node:crypto"
import { Effect, Redacted, Result } from "effect"
import { SqlClient } from "effect/sql"
import * as PermissionGrants from "../../src/authz/PermissionGrants.ts"
import { pushDeliver } from "../../src/authz/Permissions.ts"
import { EventLog } from "../../src/log/EventLog.ts"
import type { ApnsCredentials } from "../../src/push/NativePushConfig.ts"
import * as NativePushConfig from "../../src/push/NativePushConfig.ts"
import type { Environment } from "../../src/push/NativeRegistration.ts"
import * as PushAudience from "../../src/push/PushAudience.ts"
import type { PushSettings } from "../../src/push/PushConfig.ts"
import * as PushRegistrations from "../../src/push/PushRegistrations.ts"
import * as ApnsService from "../../testkit/ApnsService.ts"
import * as FcmService from "../../testkit/FcmService.ts"
import * as TestCertificate from "../../testkit/TestCertificate.ts"

export const bundleId = "com.example.bothy"

/** The APNs credentials for `key`, pointed at `service` for both environments. */
export const apnsCredentials = (key: ApnsService.ApnsKey, service: { readonly origin: string }): ApnsCredentials => ({
  key: Redacted.make(createPrivateKey(key.p8)),
  keyId: key.keyId,
  teamId: key.teamId,
  origins: { sandbox: service.origin, production: service.origin },
})

/** The FCM credentials for `account`, pointed at `service`. */
export const fcmCredentials = (account: FcmService.ServiceAccount, service: { readonly origin: string }) => {
  const checked = NativePushConfig.checkFcm(Redacted.make(account.json))
  if (Result.isFailure(checked)) throw new Error(checked.failure.message)
  return { ...checked.success, origins: { token: service.origin, send: service.origin } }
}

/** Both fakes, and the settings a worker reaches them with. */
export const start = (options: { readonly fcmLifetime?: number } = {}) =>
  Effect.gen(function* () {
    const key = ApnsService.makeKey()
    const account = FcmService.makeServiceAccount()
    const apns = yield* ApnsService.start(key)
    const fcm = yield* FcmService.start(
      account,
      options.fcmLifetime === undefined ? {} : { lifetime: options.fcmLifetime },
    )
    const settings: Partial<PushSettings> = {
      apns: apnsCredentials(key, apns),
      fcm: fcmCredentials(account, fcm),
      extraCa: [TestCertificate.cert],
    }
    return { key, account, apns, fcm, settings }
  })

export interface Device {
  readonly registration: string
  readonly token: string
}

/** A member of `space` allowed `push.deliver` there, with `n` devices of `kind`. */
export const member = (
  space: string,
  principal: string,
  kind: "apns" | "fcm",
  n = 1,
  environment: Environment = "sandbox",
) =>
  Effect.gen(function* () {
    yield* PushAudience.join(space, principal)
    yield* PermissionGrants.grant(principal, pushDeliver, space)
    return yield* Effect.forEach(Array.from({ length: n }), () =>
      Effect.gen(function* () {
        const token = kind === "apns" ? ApnsService.deviceToken() : FcmService.registrationToken()
        const device = kind === "apns" ? { token, topic: bundleId, environment } : { token }
        const { id } = yield* PushRegistrations.registerNative(principal, kind, device)
        return { registration: id, token } satisfies Device
      }),
    )
  })

export const append = (space: string, type: string, actor: string, summary?: string) =>
  Effect.gen(function* () {
    const log = yield* EventLog
    yield* log.append([{ space, type, actor, payload: summary === undefined ? {} : { summary } }])
    return (yield* log.head).seq
  })

/** The registration ids of `principal` left, in id order. */
export const registrationsOf = (principal: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<{
        id: string
      }>`SELECT id::text AS id FROM push_registrations WHERE principal = ${principal} ORDER BY push_registrations.id`,
      (rows) => rows.map((r) => r.id),
    ),
  )
