/**
 * What a push service's answer means for the message and its registration (RFC 8030 §5, and what
 * the big services document). Pure: the delivery job acts on the verdict.
 *
 * - 201, 202 (any 2xx): delivered.
 * - 404, 410: the subscription expired or was revoked; the registration is removed.
 * - 413: the payload is too large: dead, and counted (it never gets smaller).
 * - 429: the push service asks to slow down: wait for `Retry-After` (a minute without one), no
 *   attempt spent.
 * - 5xx, a timeout or a transport error: retried (`PushSchedule`) until the TTL has passed.
 * - 400, 401, 403: the request is wrong in a way every registration shares (a VAPID key the push
 *   service does not accept, a bad header): dead, the registration kept, counted as a configuration
 *   error, which pages. Deleting registrations on these would let one wrong key erase them all.
 * - another 4xx or a redirect (never followed): dead, the registration kept.
 * - refused by the outbound policy (the endpoint's host now resolves to a private address): dead.
 */
import { Duration } from "effect"
import type { SendResult } from "../outbound/OutboundSender.ts"
import * as RetryAfter from "../outbound/RetryAfter.ts"

export type DeadOutcome = "payload_too_large" | "config_error" | "rejected" | "blocked"

export type Verdict =
  | { readonly _tag: "Delivered" }
  | { readonly _tag: "Gone" }
  | { readonly _tag: "Dead"; readonly outcome: DeadOutcome; readonly reason: string }
  | { readonly _tag: "Throttled"; readonly delay: Duration.Duration }
  | { readonly _tag: "Retry"; readonly reason: string }

/** The wait after a 429 without a readable `Retry-After`. */
export const defaultThrottle = Duration.minutes(1)

const answered = (result: SendResult) => `the push service answered ${result.status}`

export const classify = (result: SendResult, now: number): Verdict => {
  const { status } = result
  if (status === undefined || result.errorClass !== undefined) {
    if (result.errorClass === "blocked_ip")
      return { _tag: "Dead", outcome: "blocked", reason: `endpoint refused: ${result.refusal ?? "blocked address"}` }
    if (result.errorClass === "too_large")
      return { _tag: "Dead", outcome: "payload_too_large", reason: "the request is above the size limit" }
    if (result.errorClass === "redirect")
      return { _tag: "Dead", outcome: "rejected", reason: `${answered(result)} (a redirect, not followed)` }
    return { _tag: "Retry", reason: `no answer from the push service (${result.errorClass ?? "connect"})` }
  }
  if (status >= 200 && status < 300) return { _tag: "Delivered" }
  if (status === 404 || status === 410) return { _tag: "Gone" }
  if (status === 413) return { _tag: "Dead", outcome: "payload_too_large", reason: answered(result) }
  if (status === 429) {
    const asked = RetryAfter.millis(result.retryAfter, now)
    return { _tag: "Throttled", delay: asked === undefined ? defaultThrottle : Duration.millis(Math.max(1000, asked)) }
  }
  if (status >= 500) return { _tag: "Retry", reason: answered(result) }
  if (status === 400 || status === 401 || status === 403) {
    return { _tag: "Dead", outcome: "config_error", reason: `${answered(result)}: check the VAPID keys and subject` }
  }
  return { _tag: "Dead", outcome: "rejected", reason: answered(result) }
}
