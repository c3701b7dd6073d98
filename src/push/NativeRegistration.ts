/**
 * A native app's registration, checked before it is stored: an APNs device token with its app's
 * bundle id (the `apns-topic`) and Apple environment, or an FCM registration token. Unlike a Web
 * Push endpoint, none of it names a host: the provider's host comes from the operator's
 * configuration, so a registration can only choose which device of that provider is reached.
 *
 * What it keeps true: a token goes into a request path or a JSON body, so it is held to the
 * characters its provider issues (hex for APNs, URL-safe text for FCM) and a length well above
 * theirs; nothing else reaches the wire.
 */
import { Effect, Schema } from "effect"
import { firstIssue } from "../platform/FieldIssue.ts"
import { InvalidPushRegistration } from "./PushRegistration.ts"

export const kinds = ["webpush", "apns", "fcm"] as const
export type Kind = (typeof kinds)[number]
export type NativeKind = Exclude<Kind, "webpush">

export const environments = ["sandbox", "production"] as const
export type Environment = (typeof environments)[number]

export const ApnsInput = Schema.Struct({
  /** The device token, hex, as `application(_:didRegisterForRemoteNotificationsWithDeviceToken:)` gives it. */
  token: Schema.String,
  /** The app's bundle id, sent as `apns-topic` (with `.voip` or another suffix for those push types). */
  topic: Schema.String,
  environment: Schema.String,
})
export type ApnsInput = typeof ApnsInput.Type

export const FcmInput = Schema.Struct({
  /** The registration token, as `FirebaseMessaging.getToken()` gives it. */
  token: Schema.String,
})
export type FcmInput = typeof FcmInput.Type

export type NativeRegistration =
  | { readonly kind: "apns"; readonly token: string; readonly topic: string; readonly environment: Environment }
  | { readonly kind: "fcm"; readonly token: string }

/** APNs tokens are 32 bytes today; Apple says they may grow, so up to 100 bytes of hex is taken. */
const apnsToken = /^(?:[0-9a-f]{2}){8,100}$/
/** FCM tokens are about 160 characters of base64url with a `:`; 4 KiB leaves room to grow. */
const fcmToken = /^[A-Za-z0-9_:.-]{16,4096}$/
/** A bundle id: reverse-DNS labels, with an optional push-type suffix (`.voip`, `.complication`). */
const bundleId = /^[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+$/

const refuse = (field: string, reason: InvalidPushRegistration["reason"], detail: string) =>
  Effect.fail(new InvalidPushRegistration({ field, reason, detail }))

const decode = <S extends Schema.Codec<unknown, unknown>>(schema: S, input: unknown, at: string) =>
  Schema.decodeUnknownEffect(schema)(input).pipe(
    Effect.mapError((e) => new InvalidPushRegistration({ ...firstIssue(e, at), reason: "BadShape" })),
  )

/** Checks an APNs registration; the token is kept in lower case, as APNs compares it. */
export const checkApns = Effect.fn("NativeRegistration.checkApns")(function* (input: unknown) {
  const json = yield* decode(ApnsInput, input, "apns")
  const token = json.token.trim().toLowerCase()
  if (!apnsToken.test(token)) {
    return yield* refuse("apns.token", "BadToken", "expected the device token as hex, 16 to 200 characters")
  }
  if (json.topic.length > 255 || !bundleId.test(json.topic)) {
    return yield* refuse("apns.topic", "BadTopic", "expected the app's bundle id, such as com.example.app")
  }
  const environment = environments.find((e) => e === json.environment)
  if (environment === undefined) {
    return yield* refuse("apns.environment", "BadEnvironment", `expected one of ${environments.join(", ")}`)
  }
  return { kind: "apns", token, topic: json.topic, environment } satisfies NativeRegistration
})

/** Checks an FCM registration. */
export const checkFcm = Effect.fn("NativeRegistration.checkFcm")(function* (input: unknown) {
  const json = yield* decode(FcmInput, input, "fcm")
  const token = json.token.trim()
  if (!fcmToken.test(token)) {
    return yield* refuse("fcm.token", "BadToken", "expected a registration token of 16 to 4096 URL-safe characters")
  }
  return { kind: "fcm", token } satisfies NativeRegistration
})
