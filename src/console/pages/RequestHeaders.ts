/**
 * The headers bothy sent with an attempt, rebuilt from what is on record (no request is kept):
 * the Standard Webhooks headers (`WebhookSignature`: the `webhook-id` is the delivery's epoch,
 * subscription and number, the same on every attempt; the timestamp the attempt's start), the
 * content type, and the subscription's extra headers as they are set now. Secrets never appear:
 * the signature and a bearer token are shown as redacted, never computed here.
 */

import { messageId, unixSeconds } from "../../webhooks/drain/WebhookSignature.ts"
import type { Subscription } from "../../webhooks/subscriptions/WebhookSubscriptions.ts"

export const redacted = "(redacted)"

export const of = (
  s: Subscription,
  delivery: { readonly epoch: number; readonly sequence: bigint | null },
  startedAt: Date,
): ReadonlyArray<readonly [string, string]> => [
  // Extra headers go first and cannot replace bothy's own (WebhookEnvelope), so they are listed first too.
  ...Object.entries(s.headers),
  ["webhook-id", delivery.sequence === null ? "(no number yet)" : messageId(delivery.epoch, s.id, delivery.sequence)],
  ["webhook-timestamp", String(unixSeconds(startedAt))],
  ["webhook-signature", `v1,${redacted}`],
  ["content-type", "application/json"],
  // bothy's HTTP client (undici's request) sends no user-agent of its own.
  ["user-agent", "(none sent)"],
  ...(s.auth === null ? [] : [["authorization", `Bearer ${redacted}`] as const]),
]
