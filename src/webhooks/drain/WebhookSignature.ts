/**
 * Signing outgoing webhooks as the Standard Webhooks spec describes
 * (https://github.com/standard-webhooks/standard-webhooks/blob/main/spec/standard-webhooks.md),
 * so receivers can verify them with any of its libraries.
 *
 * What this keeps true:
 * - The signed content is exactly `${id}.${timestamp}.${body}` and `body` is the string whose
 *   UTF-8 bytes go on the wire: re-serialising the payload after signing breaks every signature.
 * - While a secret rotates, each message carries one `v1,` signature per secret, in the order
 *   given, so receivers holding either the old or the new secret accept it.
 * - A message's `webhook-id` is the same on every retry and reveals nothing beyond the receiver's
 *   own subscription (see `messageId`).
 * - Each secret is decoded and checked once per process and kept as a `KeyObject` (at most
 *   `maxCachedKeys`, the least recently used dropped first): an HMAC keyed with a KeyObject costs
 *   about a sixth of one keyed with bytes, which Node checks and copies on every call (measured on
 *   Node 24: 2.6 against 15 µs; the HMAC was 8.7 % of the webhook worker's main thread).
 */
import { createHmac, createSecretKey, type KeyObject } from "node:crypto"
import type { Array as Arr } from "effect"
import { Effect, Redacted, Schema } from "effect"
import { LruCache } from "../../platform/LruCache.ts"
import * as WebhookSecret from "../subscriptions/WebhookSecret.ts"

/** What a receiver needs to verify one delivery attempt, as header name to value. */
export interface WebhookHeaders {
  readonly "webhook-id": string
  readonly "webhook-timestamp": string
  readonly "webhook-signature": string
}

export interface Message {
  /** Stable across retries; build it with `messageId`. */
  readonly id: string
  /** When this attempt is made (not when the event happened): receivers reject stale ones. */
  readonly timestamp: Date
  /** The request body exactly as it will be sent. */
  readonly body: string
}

const maxIdLength = 256

export class InvalidWebhookId extends Schema.TaggedError<InvalidWebhookId>()("InvalidWebhookId", {
  id: Schema.String,
}) {
  override get message() {
    return `invalid webhook id ${JSON.stringify(this.id)}: expected 1 to ${maxIdLength} of [A-Za-z0-9_-]`
  }
}

/**
 * The spec forbids `.` in ids, since a dot would make `id.timestamp.body` ambiguous. We allow less
 * than it does on purpose: what `messageId` builds from UUID-like subscription ids always fits,
 * and receivers can store the id as an idempotency key without escaping anything.
 */
const validId = /^[A-Za-z0-9_-]+$/

/**
 * A `webhook-id` for the subscription's `sequence`-th message: `msg_<epoch>_<subscriptionId>_<sequence>`.
 *
 * - Stable across retries, because receivers use it as their idempotency key: an id that changed
 *   per attempt would make a retried delivery look like a new event.
 * - Built from the subscription's own sequence, never the global event `seq`: that one counts
 *   every event of every space and tenant, so exposing it would tell a receiver how busy everyone
 *   else is, and where in the log their events sit.
 * - Carries the log epoch, which changes when the log's history is rewound (a restore): after that
 *   a subscription's sequence can repeat numbers receivers have already seen, and without the
 *   epoch they would drop the new messages as duplicates.
 *
 * `epoch` and `sequence` are digits only, so the id is unambiguous even when `subscriptionId`
 * contains `_`. `subscriptionId` must be made of `[A-Za-z0-9_-]` (a UUID is), or `sign` refuses it.
 */
export const messageId = (epoch: number, subscriptionId: string, sequence: bigint): string =>
  `msg_${epoch}_${subscriptionId}_${sequence}`

const maxCachedKeys = 10_000

const signingKeys = new LruCache<string, KeyObject>(maxCachedKeys)

/** The secret's key, decoded and checked (`WebhookSecret.decode`) the first time it signs. */
const signingKey = (secret: Redacted.Redacted<string>) => {
  const raw = Redacted.value(secret)
  const cached = signingKeys.get(raw)
  return cached !== undefined
    ? Effect.succeed(cached)
    : Effect.map(WebhookSecret.decode(secret), (bytes) => signingKeys.set(raw, createSecretKey(bytes)))
}

/** Unix seconds, as the `webhook-timestamp` header carries them. */
export const unixSeconds = (at: Date): number => Math.floor(at.getTime() / 1000)

/**
 * The three headers for one delivery attempt. Sign again for each retry, with the attempt's time:
 * the id stays, the timestamp and signatures change. No span of its own: it is microseconds of
 * HMAC inside the attempt's span, and every delivery signs.
 */
export const sign = (
  message: Message,
  secrets: Arr.NonEmptyReadonlyArray<Redacted.Redacted<string>>,
): Effect.Effect<WebhookHeaders, InvalidWebhookId | WebhookSecret.InvalidWebhookSecret> => {
  if (message.id.length > maxIdLength || !validId.test(message.id)) {
    return Effect.fail(new InvalidWebhookId({ id: message.id }))
  }
  const timestamp = String(unixSeconds(message.timestamp))
  const headersWith = (keys: ReadonlyArray<KeyObject>): WebhookHeaders => ({
    "webhook-id": message.id,
    "webhook-timestamp": timestamp,
    "webhook-signature": keys
      .map(
        (key) =>
          `v1,${createHmac("sha256", key).update(`${message.id}.${timestamp}.`).update(message.body, "utf8").digest("base64")}`,
      )
      .join(" "),
  })
  const cached = secrets.map((secret) => signingKeys.get(Redacted.value(secret)))
  if (cached.every((key) => key !== undefined)) return Effect.succeed(headersWith(cached as ReadonlyArray<KeyObject>))
  return Effect.map(Effect.forEach(secrets, signingKey), headersWith)
}
