/**
 * Settings of push, validated at start. Push is on when VAPID keys are given (`bothy push keys`
 * makes a pair); without them the worker runs no `push` consumer and says so once. Half a
 * configuration (a key without its pair, keys without a subject) is an error, never "off".
 *
 * The endpoint's target policy is the webhooks' (the same allow-lists, `webhook.allow_*`): the
 * worker passes it in, and push adds its own list of push-service host patterns.
 */
import { availableParallelism } from "node:os"
import { Context, Duration, Effect, Layer, Option, Redacted, Result } from "effect"
import type { TargetPolicy } from "../outbound/OutboundTarget.ts"
import * as TargetPolicyConfig from "../outbound/TargetPolicyConfig.ts"
import {
  envName,
  InvalidConfig,
  parseCount,
  parseDurationWithin,
  parseList,
  setting,
  variable,
} from "../platform/BothyConfig.ts"
import * as NativePushConfig from "./NativePushConfig.ts"
import { defaultBatchSize, maxBatchSize } from "./PushJob.ts"
import { defaultHostPatterns } from "./PushRegistration.ts"
import * as PushVapid from "./PushVapid.ts"

export interface PushSettings {
  readonly vapid: PushVapid.VapidKeys
  readonly policy: TargetPolicy
  /** Push-service hosts a registration's endpoint may name (`PushRegistration.hostAllowed`). */
  readonly hostPatterns: ReadonlyArray<string>
  /** How long a push service keeps an undelivered message, and how long a failing one is retried. */
  readonly ttl: Duration.Duration
  /** Registrations not refreshed for this long are removed. */
  readonly registrationMaxAge: Duration.Duration
  /** Push deliveries a worker has in flight at once (its `push` queue's concurrency). */
  readonly maxInFlight: number
  /**
   * Certificates (PEM) trusted for push services besides the system's: for tests' push services
   * only, never read from the environment (an operator has `NODE_EXTRA_CA_CERTS`).
   */
  readonly extraCa?: ReadonlyArray<string>
  /** Threads that encrypt messages off the event loop (`PushEncryption`); 0: on it. Absent: one per core. */
  readonly encryptionThreads?: number
  /** Registrations one push job sends an event to (`PushJob`). Absent: `PushJob.defaultBatchSize`. */
  readonly batchSize?: number
  /** APNs token-based credentials; absent, APNs devices' messages are configuration errors. */
  readonly apns?: NativePushConfig.ApnsCredentials
  /** FCM HTTP v1 credentials; absent, FCM tokens' messages are configuration errors. */
  readonly fcm?: NativePushConfig.FcmCredentials
}

export const defaults = {
  ttl: Duration.days(1),
  registrationMaxAge: Duration.days(60),
  maxInFlight: 64,
  /** One per core the process may use: encryption is most of a push's CPU, and threads run in parallel. */
  encryptionThreads: Math.min(64, availableParallelism()),
  batchSize: defaultBatchSize,
} as const

// "auto" (the default) rather than a number, so the documented default does not depend on the
// machine the documentation was generated on.
const parseThreads: (raw: string) => Result.Result<number, string> = (raw) =>
  raw.trim() === "auto"
    ? Result.succeed(defaults.encryptionThreads)
    : Result.mapError(parseCount(0, 64)(raw), (why) => `${why}, or auto (one per core)`)

export const keys = {
  publicKey: "push.vapid_public_key",
  privateKey: "push.vapid_private_key",
  subject: "push.subject",
} as const

// 0 is RFC 8030's "deliver now or drop"; the big push services keep a message 4 weeks at most.
const ttlBounds = parseDurationWithin({ min: Duration.zero, max: Duration.weeks(4) })
// Browsers renew subscriptions rarely; below a day a user offline over a weekend loses theirs.
const maxAgeBounds = parseDurationWithin({ min: Duration.days(1), max: Duration.days(3650) })

const hostPatternsValid = (patterns: ReadonlyArray<string>) =>
  patterns.length > 0 && patterns.every((p) => p === "*" || /^(\*\.)?[a-z0-9]([a-z0-9.-]*[a-z0-9])?$/i.test(p))
    ? Result.succeed(patterns)
    : Result.fail("expected host names, *.domain patterns, or * alone (any public host)")

const optionalVariable = (key: string) =>
  Effect.map(variable(envName(key), { key, unset: "to turn push off" }), Option.map(Redacted.value))

/** The VAPID keys and subject from the environment; `None` when no key is given (push off). */
const loadVapid = Effect.gen(function* () {
  const publicKey = yield* optionalVariable(keys.publicKey)
  const privateKey = yield* variable(envName(keys.privateKey), { key: keys.privateKey, unset: "to turn push off" })
  const subject = yield* optionalVariable(keys.subject)
  if (Option.isNone(publicKey) && Option.isNone(privateKey)) return Option.none()
  if (Option.isNone(publicKey) || Option.isNone(privateKey) || Option.isNone(subject)) {
    const missing = [
      Option.isNone(publicKey) ? keys.publicKey : undefined,
      Option.isNone(privateKey) ? keys.privateKey : undefined,
      Option.isNone(subject) ? keys.subject : undefined,
    ].filter((k) => k !== undefined)
    return yield* new InvalidConfig({
      keys: missing,
      detail: `push needs ${missing.map((k) => `${envName(k)} (${k})`).join(" and ")} as well (bothy push keys makes a key pair), or none of the VAPID keys`,
    })
  }
  const checked = PushVapid.check({
    publicKey: publicKey.value.trim(),
    privateKey: Redacted.make(Redacted.value(privateKey.value).trim()),
    subject: subject.value,
  })
  if (Result.isFailure(checked)) {
    const key = keys[checked.failure.field]
    return yield* new InvalidConfig({ keys: [key], detail: `${envName(key)} (${key}): ${checked.failure.detail}` })
  }
  return Option.some(checked.success)
})

/** Push settings from the environment, `None` when push is off; `policy` is the webhooks'. */
export const load = (policy: TargetPolicy) =>
  Effect.gen(function* () {
    const vapid = yield* loadVapid
    const apns = yield* NativePushConfig.loadApns
    const fcm = yield* NativePushConfig.loadFcm
    if (Option.isNone(vapid)) {
      if (Option.isNone(apns) && Option.isNone(fcm)) return Option.none<PushSettings>()
      const given = [...(Option.isSome(apns) ? ["APNs"] : []), ...(Option.isSome(fcm) ? ["FCM"] : [])]
      return yield* new InvalidConfig({
        keys: [keys.publicKey, keys.privateKey, keys.subject],
        detail: `${given.join(" and ")} credentials are set but push is off: native push runs in the push consumer, which needs the VAPID keys (bothy push keys makes a pair) as well`,
      })
    }
    const hostPatterns = yield* setting("push.hosts", defaultHostPatterns.join(","), (raw) =>
      Result.flatMap(parseList(raw), hostPatternsValid),
    )
    return Option.some<PushSettings>({
      vapid: vapid.value,
      policy,
      hostPatterns,
      ttl: yield* setting("push.ttl", "1d", ttlBounds),
      registrationMaxAge: yield* setting("push.registration_max_age", "60d", maxAgeBounds),
      maxInFlight: yield* setting("push.max_in_flight", String(defaults.maxInFlight), parseCount(1, 10_000)),
      encryptionThreads: yield* setting("push.encryption_threads", "auto", parseThreads),
      batchSize: yield* setting("push.batch_size", String(defaults.batchSize), parseCount(1, maxBatchSize)),
      ...(Option.isSome(apns) ? { apns: apns.value } : {}),
      ...(Option.isSome(fcm) ? { fcm: fcm.value } : {}),
    })
  })

/** For a host app, which needs push on (to register browsers, it hands them the public key). */
export const loadOn = Effect.gen(function* () {
  const settings = yield* load(yield* TargetPolicyConfig.load)
  if (Option.isSome(settings)) return settings.value
  const all = [keys.publicKey, keys.privateKey, keys.subject]
  return yield* new InvalidConfig({
    keys: all,
    detail: `push is off: set ${all.map(envName).join(", ")} (bothy push keys makes a key pair)`,
  })
})

export class PushConfig extends Context.Service<PushConfig, PushSettings>()("bothy/PushConfig") {
  /** From the environment (the target policy too); push must be on. */
  static readonly layer = Layer.effect(PushConfig, loadOn)
  static readonly layerWith = (settings: PushSettings) => Layer.succeed(PushConfig, settings)
}
