/**
 * One Web Push request (RFC 8030): the payload encrypted for one subscription (aes128gcm, RFC 8291,
 * `PushEncryptionRecord`) and the headers a push service reads, ready for `OutboundSender.send`.
 *
 * What it keeps true:
 * - The request carries exactly the `Authorization` it was given (a `PushVapid` token cache's
 *   header); nothing here signs.
 * - `TTL` and `Urgency` are always set, `Topic` when given; `Content-Encoding` is `aes128gcm`.
 * - A plaintext above `maxPlaintextBytes` is refused with `PushPayloadTooLarge` before anything
 *   is encrypted.
 */
import { Effect, Schema } from "effect"
import type { SendRequest } from "../outbound/OutboundSender.ts"
import * as PushEncryptionRecord from "./PushEncryptionRecord.ts"

/**
 * Push services take 4,096 bytes of encrypted body; aes128gcm adds 103 (an 86-byte header, the
 * padding delimiter and the 16-byte tag) to a single record. 3,000 leaves room for a change of
 * record layout and is what the envelope is cut to fit.
 */
export const maxPlaintextBytes = 3000

export class PushPayloadTooLarge extends Schema.TaggedError<PushPayloadTooLarge>()("PushPayloadTooLarge", {
  bytes: Schema.Number,
  max: Schema.Number,
}) {
  override get message() {
    return `push payload of ${this.bytes} bytes is above the ${this.max}-byte limit`
  }
}

export type Urgency = "very-low" | "low" | "normal" | "high"

export interface PushRequestInput {
  /** The subscription's endpoint URL. */
  readonly endpoint: string
  /** The subscription's `keys.p256dh`: base64url as the browser sent it, or its bytes. */
  readonly p256dh: string | Uint8Array
  /** The subscription's `keys.auth`: base64url, or its bytes. */
  readonly auth: string | Uint8Array
  /** UTF-8 text (the envelope), at most `maxPlaintextBytes` bytes. */
  readonly payload: string
  /** How long the push service keeps an undelivered message; whole seconds, 0 for "now or never". */
  readonly ttlSeconds: number
  readonly urgency: Urgency
  /**
   * From `PushMessageKey.topic`: the push service replaces an undelivered message with a newer one
   * of the same topic, so a re-sent copy of one message replaces the first.
   */
  readonly topic: string | undefined
  /** The `Authorization` header value, from `PushVapid.makeTokenCache`. */
  readonly authorization: string
}

const bytesOf = (key: string | Uint8Array) => (typeof key === "string" ? Buffer.from(key, "base64url") : key)

/** What encrypting one message reads: the browser's keys and the text. Only this crosses to a thread. */
export type BodyInput = Pick<PushRequestInput, "p256dh" | "auth" | "payload">

/**
 * The encrypted body of one push message, or why it cannot be sent; plain, so that a thread of
 * `PushEncryption` runs it without an Effect runtime. The keys are those a registration was
 * checked with (`PushRegistration.check`): a key that is not throws
 * (`PushEncryptionRecord.PushKeyRefused`), which is a defect, not a failure. `fixed` is for tests
 * only (`PushEncryptionRecord.Fixed`).
 */
export const bodyOf = (input: BodyInput, fixed?: PushEncryptionRecord.Fixed): Buffer | PushPayloadTooLarge => {
  const plaintext = Buffer.from(input.payload, "utf8")
  if (plaintext.length > maxPlaintextBytes) {
    return new PushPayloadTooLarge({ bytes: plaintext.length, max: maxPlaintextBytes })
  }
  return PushEncryptionRecord.encrypt(plaintext, bytesOf(input.p256dh), bytesOf(input.auth), fixed)
}

/** The request that carries `body`, `bodyOf(input)`: the headers a push service reads. */
export const requestWith = (input: PushRequestInput, body: Uint8Array): SendRequest => {
  const headers: Record<string, string> = {
    TTL: String(Math.max(0, Math.floor(input.ttlSeconds))),
    Urgency: input.urgency,
    "Content-Encoding": "aes128gcm",
    "Content-Type": "application/octet-stream",
    Authorization: input.authorization,
  }
  if (input.topic !== undefined) headers.Topic = input.topic
  return { url: input.endpoint, headers, body }
}

/** The request for one push message (`bodyOf`, then `requestWith`), or why it cannot be sent. */
export const requestOf = (
  input: PushRequestInput,
  fixed?: PushEncryptionRecord.Fixed,
): SendRequest | PushPayloadTooLarge => {
  const body = bodyOf(input, fixed)
  return body instanceof PushPayloadTooLarge ? body : requestWith(input, body)
}

/** `requestOf` on the calling fiber's thread. */
export const build = Effect.fn("PushRequest.build")(function* (input: PushRequestInput) {
  const request = yield* Effect.try({ try: () => requestOf(input), catch: (error) => error }).pipe(Effect.orDie)
  return request instanceof PushPayloadTooLarge ? yield* request : request
})
