/**
 * One native push message of a batch's attempt, sent to one APNs device or FCM token, and what its
 * answer makes of it in the attempt's `Ledger`, as `PushSend` does for a browser. It keeps true:
 *
 * - each request ends in exactly one ledger entry for its registration;
 * - every APNs request of a worker goes over one HTTP/2 connection per environment (the worker has
 *   one key), authorized by the one provider token of the moment (`ApnsProviderToken`); every FCM
 *   request over one connection, with the one access token of the moment (`FcmAccessToken`);
 * - a refused key or service account keeps the registration, kills the message and pages
 *   (`config_error`); so does a provider without credentials, and APNs' `BadDeviceToken` while no
 *   other device on that environment was delivered within `badTokenWindow` (`NativeOutcome`);
 * - `apns-expiration` and FCM's `ttl` are what is left of the TTL since the event's commit.
 */
import { Clock, Duration, Effect, Metric } from "effect"
import { SqlClient } from "effect/sql"
import * as ThrottledWarnings from "../platform/ThrottledWarnings.ts"
import * as ApnsProviderToken from "./ApnsProviderToken.ts"
import * as FcmAccessToken from "./FcmAccessToken.ts"
import * as NativeHttp2 from "./NativeHttp2.ts"
import * as NativeOutcome from "./NativeOutcome.ts"
import { apnsOrigins, fcmOrigins } from "./NativePushConfig.ts"
import { type ApnsMessage, type FcmMessage, type NativeMessage, NativePushRenderer } from "./NativePushRenderer.ts"
import type { Environment, NativeKind } from "./NativeRegistration.ts"
import { PushConfig, type PushSettings } from "./PushConfig.ts"
import * as PushMessageKey from "./PushMessageKey.ts"
import * as PushMetrics from "./PushMetrics.ts"
import * as PushRegistrations from "./PushRegistrations.ts"
import type { Attempt } from "./PushSend.ts"
import type { Target } from "./PushTargets.ts"

/** How recently a delivery on an environment lets its `BadDeviceToken` remove a device. */
export const badTokenWindow = Duration.minutes(10)

/** A device of the batch: its kind and token known. */
export interface Device extends Target {
  readonly kind: NativeKind
  readonly token: string
}

/** The key the ledger holds a provider's 429 under: its registrations wait together. */
export const throttleKey = (t: Device) => (t.kind === "apns" ? `apns:${t.environment}` : "fcm")

const noCredentials = (name: string, settings: string): NativeOutcome.NativeVerdict => ({
  _tag: "Dead",
  outcome: "config_error",
  reason: `no ${name} credentials: set ${settings}`,
})

const mismatch = (t: Device, message: NativeMessage): NativeOutcome.NativeVerdict => ({
  _tag: "Dead",
  outcome: "rejected",
  reason: `the renderer made a ${message._tag} message for a ${t.kind} device`,
})

interface Prepared {
  readonly origin: string
  readonly req: NativeHttp2.Request
}

/** The APNs request for one device, or why none can be made. */
const apnsRequest = (
  config: PushSettings,
  provider: ApnsProviderToken.ProviderToken | undefined,
  t: Device,
  message: ApnsMessage,
): Effect.Effect<Prepared | NativeOutcome.NativeVerdict> =>
  Effect.gen(function* () {
    if (config.apns === undefined || provider === undefined || t.environment === null || t.topic === null) {
      return noCredentials("APNs", "push.apns_key, push.apns_key_id and push.apns_team_id")
    }
    const origin = config.apns.origins?.[t.environment] ?? apnsOrigins[t.environment]
    const headers = {
      ...message.headers,
      "apns-topic": t.topic,
      authorization: yield* provider.authorization,
      "content-type": "application/json",
    }
    const body = JSON.stringify(message.payload)
    return { origin, req: { method: "POST", path: `/3/device/${t.token}`, headers, body } }
  })

/** The FCM request for one token (with the access token of the moment), or why none can be made. */
const fcmRequest = (
  config: PushSettings,
  access: FcmAccessToken.AccessToken | undefined,
  t: Device,
  message: FcmMessage,
): Effect.Effect<Prepared | NativeOutcome.NativeVerdict, NativeHttp2.NativeTransportError> =>
  Effect.gen(function* () {
    if (config.fcm === undefined || access === undefined) return noCredentials("FCM", "push.fcm_service_account")
    const authorization = yield* access.authorization.pipe(
      Effect.catchTag("FcmCredentialsRefused", (e) =>
        Effect.succeed<NativeOutcome.NativeVerdict>({ _tag: "Dead", outcome: "config_error", reason: e.message }),
      ),
    )
    if (typeof authorization !== "string") return authorization
    const origin = config.fcm.origins?.send ?? fcmOrigins.send
    const headers = { authorization, "content-type": "application/json" }
    const body = JSON.stringify({ message: { ...message.message, token: t.token } })
    const path = `/v1/projects/${encodeURIComponent(config.fcm.projectId)}/messages:send`
    return { origin, req: { method: "POST", path, headers, body } }
  })

export const make = Effect.fnUntraced(function* (ttlLeft: (event: Attempt["event"]) => Effect.Effect<number>) {
  const config = yield* PushConfig
  const sql = yield* SqlClient.SqlClient
  const renderer = yield* NativePushRenderer
  const http = yield* NativeHttp2.make(config.extraCa === undefined ? {} : { ca: config.extraCa })
  const provider = config.apns === undefined ? undefined : ApnsProviderToken.make(config.apns)
  const access = config.fcm === undefined ? undefined : yield* FcmAccessToken.make(config.fcm, http)
  const lastDelivered = new Map<Environment, number>()
  // Once a minute per provider: a wrong key fails every message to it.
  const page = ThrottledWarnings.make("1 minute", Effect.logError)

  const request = (t: Device, message: NativeMessage) =>
    t.kind === "apns" && message._tag === "apns"
      ? apnsRequest(config, provider, t, message)
      : t.kind === "fcm" && message._tag === "fcm"
        ? fcmRequest(config, access, t, message)
        : Effect.succeed(mismatch(t, message))

  /** Sends one message and returns the verdict on it. */
  const verdictOf = (attempt: Attempt, t: Device) =>
    Effect.gen(function* () {
      const { event, args } = attempt
      const left = Math.max(0, yield* ttlLeft(event))
      const now = yield* Clock.currentTimeMillis
      const key = PushMessageKey.make(event.epoch, t.registration, BigInt(args.seq))
      const input = {
        key,
        topic: PushMessageKey.topic(key),
        ...event,
        seq: BigInt(args.seq),
        ttlSeconds: Math.ceil(left / 1000),
        expiresAt: Math.ceil((now + left) / 1000),
      }
      const made = yield* request(t, renderer.render(input, t.kind))
      if ("_tag" in made) return made
      const answer = yield* http.request(made.origin, made.req).pipe(
        Effect.map((a) => NativeOutcome.classify(t.kind, a, now)),
        Effect.catchTag("NativeTransportError", (e) =>
          Effect.succeed<NativeOutcome.NativeVerdict>({ _tag: "Retry", reason: e.message }),
        ),
      )
      if (t.kind === "fcm" && answer._tag === "Dead" && answer.outcome === "config_error" && access !== undefined) {
        yield* access.forget
      }
      return answer
    }).pipe(
      Effect.catchTag("NativeTransportError", (e) =>
        Effect.succeed<NativeOutcome.NativeVerdict>({ _tag: "Retry", reason: e.message }),
      ),
    )

  /** A `BadDeviceToken` removes the device only while its environment is being delivered. */
  const judgeBadToken = (t: Device, reason: string) =>
    Effect.map(Clock.currentTimeMillis, (now): NativeOutcome.NativeVerdict => {
      const last = t.environment === null ? undefined : lastDelivered.get(t.environment)
      if (last !== undefined && now - last <= Duration.toMillis(badTokenWindow)) return { _tag: "Gone" }
      return {
        _tag: "Dead",
        outcome: "config_error",
        reason: `${reason} while no device on ${t.environment} was delivered lately: is the worker's APNs environment the app's?`,
      }
    })

  /** The message to one device, sent, and what its answer makes of it. */
  const send = (attempt: Attempt, t: Device) =>
    Effect.gen(function* () {
      const { ledger, event } = attempt
      const first = yield* verdictOf(attempt, t)
      const verdict = first._tag === "BadDeviceToken" ? yield* judgeBadToken(t, first.reason) : first
      switch (verdict._tag) {
        case "Delivered": {
          const answered = yield* Clock.currentTimeMillis
          if (t.environment !== null) lastDelivered.set(t.environment, answered)
          yield* Metric.update(PushMetrics.handoffLatency, (answered - event.occurredAt.getTime()) / 1000)
          yield* PushMetrics.countNative(t.kind, "delivered")
          return ledger.settle(t.registration)
        }
        case "Gone":
          yield* PushMetrics.countNative(t.kind, "gone")
          yield* PushRegistrations.removeGone(sql, t.registration, `${t.kind} says the device is gone`)
          return ledger.settle(t.registration)
        case "Throttled":
          yield* PushMetrics.countNative(t.kind, "throttled")
          return ledger.throttle(throttleKey(t), t.registration, verdict.delay)
        case "Retry":
          yield* PushMetrics.countNative(t.kind, "retried")
          return ledger.fail(t.registration, verdict.reason)
        case "Dead":
          if (verdict.outcome === "config_error") {
            yield* page(
              throttleKey(t),
              `push: ${t.kind}: ${verdict.reason} (registration ${t.registration} kept; counted in bothy.push.native_deliveries{provider="${t.kind}",outcome="config_error"})`,
            )
          }
          yield* PushMetrics.countNative(t.kind, verdict.outcome)
          return ledger.die(t.registration, verdict.reason)
      }
    })

  return { send, provider, access, http }
})
