/**
 * A browser's side of Web Push, for the demo's push service and (through `testkit/`) every push
 * service fake: what a browser generates when it subscribes, and what a push service and the
 * browser check of each message before it counts as arrived.
 *
 * What it keeps true: a message passes `check` only when
 * - its VAPID token (RFC 8292) is an ES256 JWT signed by the `k=` key, for this service's origin
 *   (`aud`), not expired and at most 24 h ahead (`exp`), with a `sub`; and `k=` is the
 *   subscription's application server key when it has one, as push services check;
 * - it says `Content-Encoding: aes128gcm` and carries a `TTL`;
 * - its body decrypts (aes128gcm, RFC 8291 over RFC 8188) with the browser's private key and auth
 *   secret, to UTF-8.
 * Decryption is written here from the RFCs, not taken from the library bothy encrypts with, so a
 * mistake the two shared could not pass unseen. Failures carry the reason and the status a real
 * service answers: 401 for the token, 400 for the rest.
 *
 * It lives in `src/demo/` because `bothy start` runs the demo from the package, which holds only
 * `src/` (and no development dependency); `testkit/` builds on it.
 */
import { createDecipheriv, createECDH, type ECDH, hkdfSync, randomBytes, verify } from "node:crypto"
import type { IncomingHttpHeaders } from "node:http"
import { verifyingKey } from "../push/PushVapid.ts"

/** What `PushSubscription.toJSON()` gives a web app, which registers it with bothy. */
export interface SubscriptionJson {
  readonly endpoint: string
  readonly keys: { readonly p256dh: string; readonly auth: string }
}

/** The browser's private state of one subscription: its key pair and auth secret. */
export interface Browser {
  readonly ecdh: ECDH
  readonly authSecret: Buffer
  /** The public halves, base64url, as `PushSubscription.toJSON()` gives them. */
  readonly keys: SubscriptionJson["keys"]
}

/** What a browser generates for a subscription: a P-256 key pair and 16 random auth bytes. */
export const makeBrowser = (): Browser => {
  const ecdh = createECDH("prime256v1")
  ecdh.generateKeys()
  const authSecret = randomBytes(16)
  return {
    ecdh,
    authSecret,
    keys: { p256dh: ecdh.getPublicKey().toString("base64url"), auth: authSecret.toString("base64url") },
  }
}

export type Checked<A> =
  | { readonly ok: true; readonly value: A }
  | { readonly ok: false; readonly reason: string; readonly status: number }
const ok = <A>(value: A): Checked<A> => ({ ok: true, value })
const no = (status: number, reason: string): Checked<never> => ({ ok: false, reason, status })

export interface VapidClaims {
  readonly aud: string
  readonly exp: number
  readonly sub: string
  /** The `k=` key (base64url) the token was signed with. */
  readonly key: string
  /** The JWT itself, to compare tokens across messages. */
  readonly token: string
}

/** A token whose signature verified against its `k=` key, with its claims not yet judged. */
export interface VerifiedToken {
  readonly key: string
  readonly token: string
  readonly claims: Record<string, unknown>
}

const jsonOf = (part: string): unknown => {
  try {
    return JSON.parse(Buffer.from(part, "base64url").toString("utf8"))
  } catch {
    return undefined
  }
}

const isRecord = (u: unknown): u is Record<string, unknown> => typeof u === "object" && u !== null

/**
 * The token of `authorization` (`vapid t=<JWT>, k=<key>`) when its signature verifies against `k=`
 * (and `k=` is `expectedKey`, when given); its claims are not judged here (`checkClaims`).
 */
export const verifyToken = (
  authorization: string | undefined,
  expectedKey: string | undefined,
): Checked<VerifiedToken> => {
  const scheme = /^vapid\s+(.*)$/i.exec(authorization ?? "")
  if (scheme === null) return no(401, "Authorization is not `vapid t=..., k=...`")
  const params = new Map(
    scheme[1]!.split(",").map((pair) => {
      const at = pair.indexOf("=")
      return [pair.slice(0, at).trim(), pair.slice(at + 1).trim()] as const
    }),
  )
  const token = params.get("t")
  const k = params.get("k")
  if (token === undefined || k === undefined) return no(401, "Authorization lacks t= or k=")
  const key = verifyingKey(k)
  if (key === undefined) return no(401, "k= is not an uncompressed P-256 public key")
  if (expectedKey !== undefined && k !== expectedKey)
    return no(401, "k= is not the subscription's applicationServerKey")
  const parts = token.split(".")
  if (parts.length !== 3) return no(401, "t= is not a JWT")
  const [head, body, signature] = parts as [string, string, string]
  const header = jsonOf(head)
  if (!isRecord(header) || header.alg !== "ES256") return no(401, "JWT alg is not ES256")
  const signed = verify(
    "sha256",
    Buffer.from(`${head}.${body}`),
    { key, dsaEncoding: "ieee-p1363" },
    Buffer.from(signature, "base64url"),
  )
  if (!signed) return no(401, "JWT signature does not verify against k=")
  const claims = jsonOf(body)
  return isRecord(claims) ? ok({ key: k, token, claims }) : no(401, "JWT claims are not JSON")
}

/** RFC 8292's claims of a verified token, for `origin` at `nowSeconds`. */
export const checkClaims = (verified: VerifiedToken, origin: string, nowSeconds: number): Checked<VapidClaims> => {
  const { aud, exp, sub } = verified.claims
  if (aud !== origin) return no(401, `aud ${String(aud)} is not ${origin}`)
  if (typeof exp !== "number" || !Number.isInteger(exp)) return no(401, "exp is not an integer")
  if (exp <= nowSeconds) return no(401, `exp ${exp} has passed (now ${nowSeconds})`)
  if (exp > nowSeconds + 24 * 60 * 60) return no(401, `exp ${exp} is more than 24 h ahead (now ${nowSeconds})`)
  if (typeof sub !== "string" || sub === "") return no(401, "sub is missing")
  return ok({ aud, exp, sub, key: verified.key, token: verified.token })
}

/**
 * RFC 8291 with RFC 8188's aes128gcm: the header holds the salt, the record size and the sender's
 * ephemeral public key; one record (a push message is at most 4096 bytes), padded up to a 0x02
 * delimiter. The plaintext as UTF-8, or why not.
 */
export const decrypt = (message: Buffer, browser: Pick<Browser, "ecdh" | "authSecret">): Checked<string> => {
  try {
    const salt = message.subarray(0, 16)
    const idLength = message.readUInt8(20)
    const senderKey = message.subarray(21, 21 + idLength)
    const record = message.subarray(21 + idLength)
    const shared = browser.ecdh.computeSecret(senderKey)
    const info = Buffer.concat([Buffer.from("WebPush: info\0"), browser.ecdh.getPublicKey(), senderKey])
    const ikm = Buffer.from(hkdfSync("sha256", shared, browser.authSecret, info, 32))
    const key = Buffer.from(hkdfSync("sha256", ikm, salt, Buffer.from("Content-Encoding: aes128gcm\0"), 16))
    const nonce = Buffer.from(hkdfSync("sha256", ikm, salt, Buffer.from("Content-Encoding: nonce\0"), 12))
    const decipher = createDecipheriv("aes-128-gcm", key, nonce)
    decipher.setAuthTag(record.subarray(record.length - 16))
    const padded = Buffer.concat([decipher.update(record.subarray(0, record.length - 16)), decipher.final()])
    const end = padded.lastIndexOf(2)
    if (end < 0) return no(400, "body does not decrypt: no padding delimiter")
    return ok(new TextDecoder("utf-8", { fatal: true }).decode(padded.subarray(0, end)))
  } catch (error) {
    return no(400, `body does not decrypt: ${String(error)}`)
  }
}

export interface Message {
  readonly headers: IncomingHttpHeaders
  readonly body: Buffer
}

/**
 * Every check above but the browser's, in the order a push service makes them, and the body's
 * aes128gcm header (RFC 8188 §2.1): a 16-byte salt, a record size that holds the one record, and a
 * 65-byte key id that is an uncompressed P-256 point. What a push service knows of a message it
 * does not decrypt. `verified` is an optional cache of tokens whose signature already verified (a
 * load test's service sees the same token thousands of times; its claims are still judged on every
 * message).
 */
export const checkSealed = (
  message: Message,
  service: {
    readonly origin: string
    readonly nowSeconds: number
    readonly applicationServerKey: string | undefined
    readonly verified?: Map<string, VerifiedToken>
  },
): Checked<VapidClaims> => {
  const authorization = message.headers.authorization
  const cached = authorization === undefined ? undefined : service.verified?.get(authorization)
  const token = cached === undefined ? verifyToken(authorization, service.applicationServerKey) : ok(cached)
  if (!token.ok) return token
  const vapid = checkClaims(token.value, service.origin, service.nowSeconds)
  if (!vapid.ok) return vapid
  if (cached === undefined && authorization !== undefined) service.verified?.set(authorization, token.value)
  if (message.headers["content-encoding"] !== "aes128gcm") return no(400, "Content-Encoding is not aes128gcm")
  if (!/^\d+$/.test(String(message.headers.ttl ?? ""))) return no(400, "TTL is missing or not a number")
  const header = checkRecordHeader(message.body)
  return header.ok ? vapid : header
}

/**
 * The aes128gcm header of a Web Push body (RFC 8188 §2.1, RFC 8291 §4): a 16-byte salt, a record
 * size that holds the one record, and a 65-byte key id that is an uncompressed P-256 point; then
 * one record of at least a padding delimiter and the 16-byte tag.
 */
export const checkRecordHeader = (body: Buffer): Checked<void> => {
  if (body.length < 86 + 17) return no(400, `body of ${body.length} bytes is shorter than one aes128gcm record`)
  if (body.readUInt8(20) !== 65 || body.readUInt8(21) !== 4) return no(400, "key id is not an uncompressed P-256 key")
  if (body.readUInt32BE(16) < body.length - 86) return no(400, "record size is smaller than the record")
  return ok(undefined)
}

/** `checkSealed`, then the browser's decryption: every check above. */
export const check = (
  message: Message,
  browser: Pick<Browser, "ecdh" | "authSecret">,
  service: Parameters<typeof checkSealed>[1],
): Checked<{ readonly plaintext: string; readonly vapid: VapidClaims }> => {
  const vapid = checkSealed(message, service)
  if (!vapid.ok) return vapid
  const plaintext = decrypt(message.body, browser)
  return plaintext.ok ? ok({ plaintext: plaintext.value, vapid: vapid.value }) : plaintext
}
