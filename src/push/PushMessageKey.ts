/**
 * The idempotency key of one push message: one per (event, registration), the same on every
 * attempt, retry and re-send of that message, whichever worker sends it. A worker killed after its
 * request reached the push service but before the answer was recorded leaves the job `running`;
 * once its lease lapses another worker sends the message again, and the key is what lets the push
 * service and the browser drop that copy:
 *
 * - the `Topic` header (RFC 8030 §5.4, `topic`): a push service that still holds the first copy
 *   undelivered replaces it with the second;
 * - the envelope's `id` and `tag` (`PushEnvelope`): a service worker that shows the notification
 *   with `tag` replaces the first one instead of showing a second, and one that keeps the last ids
 *   it saw drops the repeat.
 *
 * The key carries the log epoch as the event's id does, so an event numbered again after a
 * restore (`bothy restore finalize`) never shares a key with the one the seq had before. It is
 * built like a webhook's `webhook-id` (`WebhookSignature.messageId`): digits and `_` only.
 */
import { hash } from "node:crypto"

/** `push_<epoch>_<registration>_<seq>`: unambiguous, since the three parts are digits only. */
export const make = (epoch: number, registration: string, seq: bigint): string => `push_${epoch}_${registration}_${seq}`

/**
 * The RFC 8030 `Topic` of the message whose key is `key`: 32 characters of the URL-safe base64
 * alphabet (the most a topic may have), a SHA-256 cut to 24 bytes, so the push service reads
 * neither the event nor the registration from it.
 */
export const topic = (key: string): string =>
  // 24 bytes are 32 characters of base64url exactly, so the digest's text cut at 32 is those bytes'.
  hash("sha256", key, "base64url").slice(0, 32)
