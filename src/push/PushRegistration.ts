/**
 * A browser's push subscription, as `PushSubscription.toJSON()` gives it, checked before it is
 * stored. The endpoint comes from a browser, so it is attacker-controlled: it must name a host of
 * the operator's list of push-service host patterns, checked before any DNS lookup, and pass the
 * outbound target policy (https, and no private, loopback or metadata address for the host now;
 * `CheckedDialer` checks the address actually dialed again at send time). The keys are what RFC 8291 encryption needs: `p256dh`, an
 * uncompressed P-256 point on the curve (65 bytes, `0x04` first), and `auth`, 16 bytes, both
 * base64url as browsers send them.
 */
import { ECDH } from "node:crypto"
import { Effect, Schema } from "effect"
import { parseTarget, type TargetPolicy, type UnsafeWebhookTarget, validateUrl } from "../outbound/OutboundTarget.ts"
import { firstIssue } from "../platform/FieldIssue.ts"
import { storableCheck } from "../platform/StorableText.ts"

/**
 * The public push services of the big browsers: Chrome and Android (FCM), Firefox (Mozilla's
 * autopush), Edge (WNS) and Safari (Apple). `*` alone allows any public host, for a self-hosted
 * push server; `*.example.com` allows the subdomains of `example.com`, not the name itself.
 */
export const defaultHostPatterns: ReadonlyArray<string> = [
  "fcm.googleapis.com",
  "android.googleapis.com",
  "*.push.services.mozilla.com",
  "*.notify.windows.com",
  "web.push.apple.com",
]

/** Endpoint URLs longer than this are refused (the push services' own are well under 1 KiB). */
export const maxEndpointLength = 2048

export const PushSubscriptionJson = Schema.Struct({
  endpoint: Schema.String.check(Schema.isNonEmpty(), Schema.isMaxLength(maxEndpointLength), storableCheck),
  keys: Schema.Struct({ p256dh: Schema.String, auth: Schema.String }),
})
export type PushSubscriptionJson = typeof PushSubscriptionJson.Type

export class InvalidPushRegistration extends Schema.TaggedError<InvalidPushRegistration>()("InvalidPushRegistration", {
  /** `endpoint`, `keys.p256dh`, `keys.auth`, or the field the shape check names. */
  field: Schema.String,
  reason: Schema.Literals([
    "BadShape",
    "UnsafeEndpoint",
    "HostNotAllowed",
    "BadP256dh",
    "BadAuth",
    "BadToken",
    "BadTopic",
    "BadEnvironment",
  ]),
  detail: Schema.String,
}) {
  override get message() {
    return `push registration refused${this.field === "" ? "" : ` at ${this.field}`} (${this.reason}): ${this.detail}`
  }
}

/** A checked registration: the endpoint as a URL and the keys as bytes. */
export interface PushRegistration {
  readonly endpoint: URL
  readonly p256dh: Uint8Array
  readonly auth: Uint8Array
}

/** Whether `hostname` matches one of `patterns` (see `defaultHostPatterns`); case does not matter. */
export const hostAllowed = (hostname: string, patterns: ReadonlyArray<string>): boolean => {
  const host = hostname.toLowerCase().replace(/\.$/, "")
  return patterns.some((raw) => {
    const pattern = raw.toLowerCase()
    if (pattern === "*") return true
    // A hostname never starts with a dot, so ending in `.example.com` means a subdomain of it.
    if (pattern.startsWith("*.")) return host.endsWith(pattern.slice(1))
    return host === pattern
  })
}

const base64url = /^[A-Za-z0-9_-]*={0,2}$/

/** The bytes of a base64url key, or undefined when it is not base64url. */
const keyBytes = (text: string): Uint8Array | undefined =>
  base64url.test(text) ? new Uint8Array(Buffer.from(text, "base64url")) : undefined

const refuse = (field: string, reason: InvalidPushRegistration["reason"], detail: string) =>
  Effect.fail(new InvalidPushRegistration({ field, reason, detail }))

/** `p256dh`: 65 bytes, uncompressed, and a point of P-256 (OpenSSL refuses one off the curve). */
const checkP256dh = (text: string) => {
  const bytes = keyBytes(text)
  if (bytes === undefined) return refuse("keys.p256dh", "BadP256dh", "not base64url")
  if (bytes.length !== 65 || bytes[0] !== 4) {
    return refuse("keys.p256dh", "BadP256dh", `expected an uncompressed P-256 point of 65 bytes, got ${bytes.length}`)
  }
  try {
    ECDH.convertKey(bytes, "prime256v1")
  } catch {
    return refuse("keys.p256dh", "BadP256dh", "not a point of the P-256 curve")
  }
  return Effect.succeed(bytes)
}

const checkAuth = (text: string) => {
  const bytes = keyBytes(text)
  if (bytes === undefined) return refuse("keys.auth", "BadAuth", "not base64url")
  if (bytes.length !== 16) return refuse("keys.auth", "BadAuth", `expected 16 bytes, got ${bytes.length}`)
  return Effect.succeed(bytes)
}

/**
 * Checks a `PushSubscription.toJSON()` value: its shape, the endpoint and the keys. The endpoint is
 * judged in the order that asks DNS nothing about a host the operator did not allow: first what
 * needs no lookup (`parseTarget`: https, no credentials, no blocked IP literal), then the host
 * patterns (`push.hosts`), and only for an allowed host the lookup of every address it resolves to
 * (`validateUrl`, as for webhooks). Resolving first would let any client make the server look up
 * any name it likes (a DNS beacon, or a probe of the internal resolver).
 */
export const check = Effect.fn("PushRegistration.check")(function* (
  input: unknown,
  policy: TargetPolicy,
  hostPatterns: ReadonlyArray<string> = defaultHostPatterns,
) {
  const json = yield* Schema.decodeUnknownEffect(PushSubscriptionJson)(input).pipe(
    Effect.mapError((e) => new InvalidPushRegistration({ ...firstIssue(e), reason: "BadShape" })),
  )
  const unsafe = (e: UnsafeWebhookTarget) =>
    new InvalidPushRegistration({ field: "endpoint", reason: "UnsafeEndpoint", detail: e.detail })
  const parsed = yield* Effect.fromResult(parseTarget(json.endpoint, policy)).pipe(Effect.mapError(unsafe))
  if (!hostAllowed(parsed.hostname, hostPatterns)) {
    return yield* refuse("endpoint", "HostNotAllowed", `${parsed.hostname} matches none of ${hostPatterns.join(", ")}`)
  }
  const url = yield* validateUrl(json.endpoint, policy).pipe(Effect.mapError(unsafe))
  const p256dh = yield* checkP256dh(json.keys.p256dh)
  const auth = yield* checkAuth(json.keys.auth)
  return { endpoint: url, p256dh, auth } satisfies PushRegistration
})
