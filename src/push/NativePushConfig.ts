/**
 * The credentials of native push, from the environment, checked before anything starts:
 *
 * - APNs token-based auth: the `.p8` key (an EC P-256 private key in PEM), its 10-character key id
 *   and the 10-character team id, all three or none;
 * - FCM HTTP v1: a service account's JSON key (`project_id`, `client_email`, an RSA `private_key`).
 *
 * What it keeps true: the keys are `Redacted` from the moment they are read, and no error quotes
 * them (an error names the setting and what is wrong with it). Half a configuration is an error,
 * never "off". The providers' hosts are Apple's and Google's; only a host app or a test sets other
 * ones (`ApnsCredentials.origins`, `FcmCredentials.origins`), never the environment, since a
 * production deployment has no use for them.
 */
import { createPrivateKey, type KeyObject } from "node:crypto"
import { Effect, Option, Redacted, Result } from "effect"
import { envName, InvalidConfig, variable } from "../platform/BothyConfig.ts"
import type { Environment } from "./NativeRegistration.ts"

export const keys = {
  apnsKey: "push.apns_key",
  apnsKeyId: "push.apns_key_id",
  apnsTeamId: "push.apns_team_id",
  fcmServiceAccount: "push.fcm_service_account",
} as const

export interface ApnsCredentials {
  /** The `.p8` key, parsed. */
  readonly key: Redacted.Redacted<KeyObject>
  readonly keyId: string
  readonly teamId: string
  /** Where each environment's APNs is; Apple's unless a test says otherwise. */
  readonly origins?: Partial<Record<Environment, string>>
}

export interface FcmCredentials {
  readonly projectId: string
  readonly clientEmail: string
  /** The service account's key, parsed. */
  readonly privateKey: Redacted.Redacted<KeyObject>
  readonly privateKeyId?: string
  /** Where the OAuth token endpoint and the send endpoint are; Google's unless a test says otherwise. */
  readonly origins?: { readonly token?: string; readonly send?: string }
}

export const apnsOrigins: Record<Environment, string> = {
  production: "https://api.push.apple.com",
  sandbox: "https://api.sandbox.push.apple.com",
}

export const fcmOrigins = { token: "https://oauth2.googleapis.com", send: "https://fcm.googleapis.com" } as const

/** Apple's and Google's ids: ten upper-case letters and digits. */
const appleId = /^[A-Z0-9]{10}$/

const refusal = (key: string, detail: string) =>
  new InvalidConfig({ keys: [key], detail: `${envName(key)} (${key}) ${detail}` })

const privateKeyOf = (pem: string, type: "ec" | "rsa"): KeyObject | undefined => {
  try {
    const key = createPrivateKey(pem)
    if (key.asymmetricKeyType !== type) return undefined
    if (type === "ec" && key.asymmetricKeyDetails?.namedCurve !== "prime256v1") return undefined
    return key
  } catch {
    return undefined
  }
}

/** Checks APNs credentials; the errors name the setting, never its value. */
export const checkApns = (input: {
  readonly key: Redacted.Redacted<string>
  readonly keyId: string
  readonly teamId: string
}): Result.Result<ApnsCredentials, InvalidConfig> => {
  const key = privateKeyOf(Redacted.value(input.key).trim(), "ec")
  if (key === undefined) {
    return Result.fail(refusal(keys.apnsKey, "is not an APNs .p8 key: expected a P-256 private key in PEM"))
  }
  if (!appleId.test(input.keyId.trim())) {
    return Result.fail(refusal(keys.apnsKeyId, "is not a key id: expected the 10 characters Apple shows with the key"))
  }
  if (!appleId.test(input.teamId.trim())) {
    return Result.fail(refusal(keys.apnsTeamId, "is not a team id: expected the 10 characters of the Apple team"))
  }
  return Result.succeed({ key: Redacted.make(key), keyId: input.keyId.trim(), teamId: input.teamId.trim() })
}

const text = (json: Record<string, unknown>, field: string) =>
  typeof json[field] === "string" && json[field] !== "" ? (json[field] as string) : undefined

/** Checks an FCM service account's JSON key; the errors name the setting and the field, never a value. */
export const checkFcm = (serviceAccount: Redacted.Redacted<string>): Result.Result<FcmCredentials, InvalidConfig> => {
  const bad = (detail: string) => Result.fail(refusal(keys.fcmServiceAccount, detail))
  let json: unknown
  try {
    json = JSON.parse(Redacted.value(serviceAccount))
  } catch {
    return bad("is not JSON: expected the service account's key file as Firebase gives it")
  }
  if (typeof json !== "object" || json === null || Array.isArray(json)) return bad("is not a JSON object")
  const record = json as Record<string, unknown>
  if (record.type !== undefined && record.type !== "service_account")
    return bad('has a "type" other than service_account')
  const projectId = text(record, "project_id")
  const clientEmail = text(record, "client_email")
  const pem = text(record, "private_key")
  const missing = [
    projectId === undefined ? "project_id" : undefined,
    clientEmail === undefined ? "client_email" : undefined,
    pem === undefined ? "private_key" : undefined,
  ].filter((f) => f !== undefined)
  if (missing.length > 0) return bad(`lacks ${missing.join(", ")}`)
  const privateKey = privateKeyOf(pem!, "rsa")
  if (privateKey === undefined) return bad("has a private_key that is not an RSA private key in PEM")
  const privateKeyId = text(record, "private_key_id")
  return Result.succeed({
    projectId: projectId!,
    clientEmail: clientEmail!,
    privateKey: Redacted.make(privateKey),
    ...(privateKeyId === undefined ? {} : { privateKeyId }),
  })
}

const optional = (key: string) => variable(envName(key), { key, unset: "for no native push of this provider" })

/** The APNs credentials from the environment; `None` when none of the three is set. */
export const loadApns = Effect.gen(function* () {
  const key = yield* optional(keys.apnsKey)
  const keyId = yield* optional(keys.apnsKeyId)
  const teamId = yield* optional(keys.apnsTeamId)
  const given = [key, keyId, teamId].filter(Option.isSome).length
  if (given === 0) return Option.none<ApnsCredentials>()
  if (Option.isNone(key) || Option.isNone(keyId) || Option.isNone(teamId)) {
    const missing = [
      Option.isNone(key) ? keys.apnsKey : undefined,
      Option.isNone(keyId) ? keys.apnsKeyId : undefined,
      Option.isNone(teamId) ? keys.apnsTeamId : undefined,
    ].filter((k) => k !== undefined)
    return yield* new InvalidConfig({
      keys: missing,
      detail: `APNs needs ${missing.map((k) => `${envName(k)} (${k})`).join(" and ")} as well, or none of its three settings`,
    })
  }
  const checked = checkApns({
    key: key.value,
    keyId: Redacted.value(keyId.value),
    teamId: Redacted.value(teamId.value),
  })
  return Option.some(yield* Effect.fromResult(checked))
})

/** The FCM credentials from the environment; `None` when unset. */
export const loadFcm = Effect.gen(function* () {
  const serviceAccount = yield* optional(keys.fcmServiceAccount)
  if (Option.isNone(serviceAccount)) return Option.none<FcmCredentials>()
  return Option.some(yield* Effect.fromResult(checkFcm(serviceAccount.value)))
})
