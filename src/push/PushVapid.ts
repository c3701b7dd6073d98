/**
 * VAPID (RFC 8292): the application server's key pair, and the `Authorization` header that proves
 * a push request comes from it.
 *
 * What it keeps true:
 * - `check` accepts only a pair that works: a public key that is an uncompressed P-256 point, a
 *   32-byte private key that really derives it, and a `mailto:` or `https:` subject. Its errors
 *   never quote the private key.
 * - A token's `exp` comes from `Clock` and is at most 12 hours ahead (RFC 8292 allows 24; push
 *   services differ in what they accept, and 12 is what web-push itself defaults to).
 * - The token cache signs once per push-service origin and reuses that header until `renewBefore`
 *   ahead of its `exp`, so a token always has at least `renewBefore` left when it is sent (time in
 *   the job queue and clock skew eat into it). It holds at most `maxOrigins` origins, dropping the
 *   one used longest ago.
 */
import { createECDH, createPublicKey, ECDH, type KeyObject } from "node:crypto"
import { Clock, Duration, Effect, Redacted, Result, Schema } from "effect"
import webpush from "web-push"
import { LruCache } from "../platform/LruCache.ts"

export interface VapidKeys {
  /** base64url of the 65-byte uncompressed P-256 point, as browsers take it (`applicationServerKey`). */
  readonly publicKey: string
  /** base64url of the 32-byte private scalar. */
  readonly privateKey: Redacted.Redacted<string>
  /** Who to contact about this sender: a `mailto:` or `https:` URL. */
  readonly subject: string
}

export class InvalidVapidKeys extends Schema.TaggedError<InvalidVapidKeys>()("InvalidVapidKeys", {
  field: Schema.Literals(["publicKey", "privateKey", "subject"]),
  detail: Schema.String,
}) {
  override get message() {
    return `VAPID ${this.field} refused: ${this.detail}`
  }
}

/** A fresh key pair, both base64url (for `bothy push keys`). */
export const generate = (): { readonly publicKey: string; readonly privateKey: string } => {
  const { publicKey, privateKey } = webpush.generateVAPIDKeys()
  return { publicKey, privateKey }
}

/**
 * A VAPID public key (base64url of an uncompressed P-256 point, as the `k=` of a token gives it) as
 * a key to verify tokens with, for whoever receives them (a push service); `undefined` when it is
 * no such point.
 */
export const verifyingKey = (k: string): KeyObject | undefined => {
  const bytes = Buffer.from(k, "base64url")
  if (bytes.length !== 65 || bytes[0] !== 0x04) return undefined
  try {
    return createPublicKey({
      key: {
        kty: "EC",
        crv: "P-256",
        x: bytes.subarray(1, 33).toString("base64url"),
        y: bytes.subarray(33).toString("base64url"),
      },
      format: "jwk",
    })
  } catch {
    return undefined
  }
}

// Unpadded, as web-push requires (it refuses `=`).
const base64url = /^[A-Za-z0-9_-]+$/

const refuse = (field: InvalidVapidKeys["field"], detail: string) =>
  Result.fail(new InvalidVapidKeys({ field, detail }))

/** The public key's bytes: 65, uncompressed (`0x04` first), and a point on P-256. */
const publicKeyBytes = (text: string): Result.Result<Buffer, InvalidVapidKeys> => {
  if (!base64url.test(text)) return refuse("publicKey", "not unpadded base64url")
  const bytes = Buffer.from(text, "base64url")
  if (bytes.length !== 65 || bytes[0] !== 0x04)
    return refuse("publicKey", `${bytes.length} bytes; an uncompressed P-256 point is 65, starting with 0x04`)
  try {
    ECDH.convertKey(bytes, "prime256v1")
  } catch {
    return refuse("publicKey", "not a point on P-256")
  }
  return Result.succeed(bytes)
}

/** The public key the private key derives; the details never include the key itself. */
const derivedPublicKey = (text: string): Result.Result<Buffer, InvalidVapidKeys> => {
  if (!base64url.test(text)) return refuse("privateKey", "not unpadded base64url")
  const bytes = Buffer.from(text, "base64url")
  if (bytes.length !== 32) return refuse("privateKey", `${bytes.length} bytes; a P-256 private key is 32`)
  const ecdh = createECDH("prime256v1")
  try {
    ecdh.setPrivateKey(bytes)
  } catch {
    return refuse("privateKey", "not a valid P-256 private key (zero or not below the curve order)")
  }
  return Result.succeed(ecdh.getPublicKey())
}

const checkSubject = (subject: string): Result.Result<string, InvalidVapidKeys> => {
  const url = URL.parse(subject)
  if (url === null) return refuse("subject", "not a URL; use mailto:you@example.com or an https: URL")
  if (url.protocol === "mailto:") {
    return url.pathname.includes("@") ? Result.succeed(subject) : refuse("subject", "a mailto: URL needs an address")
  }
  if (url.protocol !== "https:") return refuse("subject", `${url.protocol} URL; use mailto: or https:`)
  // Apple's push service refuses a localhost subject (BadJwtToken), and web-push warns on the
  // console at every signing.
  if (url.hostname === "localhost") return refuse("subject", "https://localhost is refused by Apple's push service")
  return Result.succeed(subject)
}

/** Checks a key pair and subject from configuration; see the module header. */
export const check = (input: {
  readonly publicKey: string
  readonly privateKey: Redacted.Redacted<string>
  readonly subject: string
}): Result.Result<VapidKeys, InvalidVapidKeys> => {
  const publicKey = publicKeyBytes(input.publicKey)
  if (Result.isFailure(publicKey)) return Result.fail(publicKey.failure)
  const derived = derivedPublicKey(Redacted.value(input.privateKey))
  if (Result.isFailure(derived)) return Result.fail(derived.failure)
  if (!derived.success.equals(publicKey.success))
    return refuse("privateKey", "does not belong to the public key (the pair was mixed up or one was cut)")
  const subject = checkSubject(input.subject)
  if (Result.isFailure(subject)) return Result.fail(subject.failure)
  return Result.succeed({ publicKey: input.publicKey, privateKey: input.privateKey, subject: subject.success })
}

/** The most a token may live: RFC 8292 allows 24 h, we allow 12 (see the module header). */
export const maxLifetime = Duration.hours(12)

export interface TokenCacheOptions {
  /** How long a token lives (`exp` - now); default and maximum 12 hours. */
  readonly lifetime?: Duration.Input
  /** A cached token is replaced once it has less than this left; default 1 hour. */
  readonly renewBefore?: Duration.Input
  /** Origins kept; default 1,000 (push services are few). */
  readonly maxOrigins?: number
  /** Sign every request and keep nothing: the baseline the benchmark measures reuse against. */
  readonly signEach?: boolean
}

export interface TokenCache {
  /**
   * The `Authorization` header value (`vapid t=<JWT>, k=<public key>`) for a push service whose
   * endpoints have this origin (`new URL(endpoint).origin`, the JWT's `aud`).
   */
  readonly authorization: (endpointOrigin: string) => Effect.Effect<string>
}

interface Signed {
  readonly header: string
  /** When to sign again, in epoch milliseconds. */
  readonly renewAt: number
}

/** The header of a token for `audience` expiring at `expSeconds` (epoch seconds). */
const sign = (keys: VapidKeys, audience: string, expSeconds: number): string =>
  webpush.getVapidHeaders(
    audience,
    keys.subject,
    keys.publicKey,
    Redacted.value(keys.privateKey),
    "aes128gcm",
    expSeconds,
  ).Authorization

/**
 * A VAPID header source for `keys` (checked by `check`): one token per origin, reused until
 * `renewBefore` ahead of its `exp`; or, with `signEach`, a new token every time.
 */
export const makeTokenCache = (keys: VapidKeys, options: TokenCacheOptions = {}): Effect.Effect<TokenCache> =>
  Effect.sync(() => {
    const lifetimeMs = Math.min(Duration.toMillis(options.lifetime ?? maxLifetime), Duration.toMillis(maxLifetime))
    const renewBeforeMs = Duration.toMillis(options.renewBefore ?? "1 hour")
    const maxOrigins = Math.max(1, options.maxOrigins ?? 1000)
    const cache = new LruCache<string, Signed>(maxOrigins)
    const fresh = (origin: string, now: number): Signed => {
      const expSeconds = Math.floor((now + lifetimeMs) / 1000)
      return { header: sign(keys, origin, expSeconds), renewAt: expSeconds * 1000 - renewBeforeMs }
    }
    const authorization = (origin: string) =>
      Effect.map(Clock.currentTimeMillis, (now) => {
        if (options.signEach === true) return fresh(origin, now).header
        const cached = cache.get(origin)
        if (cached !== undefined && now < cached.renewAt) return cached.header
        return cache.set(origin, fresh(origin, now)).header
      })
    return { authorization }
  })
