/**
 * Signed, expiring tokens for the console: the session cookie and the portal link. A token is
 * `<payload>.<mac>`, both unpadded base64url; the MAC (HMAC-SHA-256) covers a purpose as well as
 * the payload, so a portal link cannot be replayed as a cookie or the other way round.
 *
 * The key is derived (HKDF) from `BOTHY_WEBHOOK_SECRET_KEY`: every worker of an installation
 * already shares it, so a session made by one worker holds on another, and it lives outside the
 * database like the secrets it guards. Nothing is stored: a token is valid until it expires.
 */
import { createHmac, hkdfSync, randomBytes, timingSafeEqual } from "node:crypto"
import { Option, Redacted } from "effect"
import type { Caller } from "../admin/AdminAuth.ts"
import type { SecretKey } from "../crypto/SecretBox.ts"

export type Purpose = "session" | "portal-link"

/** What a token says: who, until when (epoch seconds), and a nonce the CSRF token is bound to. */
export interface Claims {
  readonly caller: Caller
  readonly expiresAt: number
  readonly nonce: string
}

export const deriveKey = (secretKey: SecretKey): Redacted.Redacted<Uint8Array> =>
  Redacted.make(
    new Uint8Array(hkdfSync("sha256", Redacted.value(secretKey.material), "", "bothy console tokens v1", 32)),
  )

const mac = (key: Redacted.Redacted<Uint8Array>, purpose: Purpose, payload: string) =>
  createHmac("sha256", Redacted.value(key)).update(`${purpose}\0${payload}`).digest()

export const newNonce = () => randomBytes(16).toString("base64url")

export const sign = (key: Redacted.Redacted<Uint8Array>, purpose: Purpose, claims: Claims): string => {
  const who = claims.caller._tag === "Operator" ? { o: 1 } : { p: claims.caller.principal }
  const payload = Buffer.from(JSON.stringify({ ...who, e: claims.expiresAt, n: claims.nonce })).toString("base64url")
  return `${payload}.${mac(key, purpose, payload).toString("base64url")}`
}

/** The claims of a token this key signed for `purpose` and that has not expired at `nowSeconds`. */
export const verify = (
  key: Redacted.Redacted<Uint8Array>,
  purpose: Purpose,
  token: string,
  nowSeconds: number,
): Option.Option<Claims> => {
  const [payload, given, ...rest] = token.split(".")
  if (payload === undefined || given === undefined || rest.length > 0) return Option.none()
  const want = mac(key, purpose, payload)
  const got = Buffer.from(given, "base64url")
  if (got.length !== want.length || !timingSafeEqual(got, want)) return Option.none()
  try {
    const body = JSON.parse(Buffer.from(payload, "base64url").toString("utf8"))
    if (typeof body.e !== "number" || body.e <= nowSeconds || typeof body.n !== "string") return Option.none()
    const caller: Caller | undefined =
      body.o === 1
        ? { _tag: "Operator" }
        : typeof body.p === "string"
          ? { _tag: "Principal", principal: body.p }
          : undefined
    return caller === undefined ? Option.none() : Option.some({ caller, expiresAt: body.e, nonce: body.n })
  } catch {
    return Option.none()
  }
}

/** The CSRF token of a session: bound to its nonce, so it changes with every session. */
export const csrfToken = (key: Redacted.Redacted<Uint8Array>, claims: Claims) =>
  createHmac("sha256", Redacted.value(key)).update(`csrf\0${claims.nonce}`).digest("base64url")

export const sameToken = (a: string, b: string) => {
  const x = Buffer.from(a)
  const y = Buffer.from(b)
  return x.length === y.length && timingSafeEqual(x, y)
}
