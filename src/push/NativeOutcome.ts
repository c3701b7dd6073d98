/**
 * What APNs' and FCM's answers mean for a message and its registration, in `PushOutcome`'s terms
 * (the batch's ledger acts on them the same way). Pure.
 *
 * - Remove the registration (`Gone`): APNs `410` (`Unregistered`, `ExpiredToken`); FCM `404`
 *   (`UNREGISTERED`, `NOT_FOUND`), and `400 INVALID_ARGUMENT` when it is about the token.
 * - APNs `400 BadDeviceToken` is `BadDeviceToken`: the sender removes the device only while other
 *   devices on the same key and environment are being delivered. A worker configured for the
 *   wrong environment gets it for every device, and that must page, not wipe them all.
 * - Retry: `429` (wait for `Retry-After`, a minute without one), `500` and `503`, and no answer at
 *   all, with push's schedule until the TTL has passed.
 * - Keep the registration, dead, and page (`config_error`): APNs `403` (the provider token: a bad
 *   key, key id or team id), FCM `401` and `403` (the service account, or a token of another
 *   project). A bad key must never wipe every registration.
 * - `413`: the payload is too large (dead, counted). Any other refusal: dead, kept (`rejected`).
 */
import { Duration } from "effect"
import * as RetryAfter from "../outbound/RetryAfter.ts"
import type { Answer } from "./NativeHttp2.ts"
import type { NativeKind } from "./NativeRegistration.ts"
import { defaultThrottle, type Verdict } from "./PushOutcome.ts"

export type NativeVerdict = Verdict | { readonly _tag: "BadDeviceToken"; readonly reason: string }

/** APNs' `reason`, or FCM's `errorCode` (else its `status`), from the answer's JSON body. */
export const reasonOf = (kind: NativeKind, body: string): string | undefined => {
  try {
    const json = JSON.parse(body) as Record<string, unknown>
    if (kind === "apns") return typeof json.reason === "string" ? json.reason.slice(0, 80) : undefined
    const error = json.error as { status?: unknown; details?: ReadonlyArray<{ errorCode?: unknown }> } | undefined
    const code = error?.details?.find((d) => typeof d.errorCode === "string")?.errorCode
    const named = typeof code === "string" ? code : error?.status
    return typeof named === "string" ? named.slice(0, 80) : undefined
  } catch {
    return undefined
  }
}

/** Whether FCM's 400 names the token (a malformed or foreign one) rather than the message. */
const aboutToken = (body: string) =>
  /"message"\s*:\s*"[^"]*\btoken\b/i.test(body) || /"field"\s*:\s*"message\.token"/.test(body)

const provider = { apns: "APNs", fcm: "FCM" } as const

export const classify = (kind: NativeKind, answer: Answer, now: number): NativeVerdict => {
  const { status } = answer
  const reason = reasonOf(kind, answer.body)
  const said = `${provider[kind]} answered ${status}${reason === undefined ? "" : ` ${reason}`}`
  if (status >= 200 && status < 300) return { _tag: "Delivered" }
  if (status === 429) {
    const asked = RetryAfter.millis(answer.headers["retry-after"], now)
    return { _tag: "Throttled", delay: asked === undefined ? defaultThrottle : Duration.millis(Math.max(1000, asked)) }
  }
  if (status === 500 || status === 502 || status === 503 || status === 504) return { _tag: "Retry", reason: said }
  if (status === 413) return { _tag: "Dead", outcome: "payload_too_large", reason: said }
  if (kind === "apns") {
    if (status === 410) return { _tag: "Gone" }
    if (status === 400 && reason === "BadDeviceToken") return { _tag: "BadDeviceToken", reason: said }
    if (status === 403) {
      return { _tag: "Dead", outcome: "config_error", reason: `${said}: check the APNs key, key id and team id` }
    }
  } else {
    if (status === 404) return { _tag: "Gone" }
    if (status === 400 && (reason === "INVALID_ARGUMENT" || reason === undefined) && aboutToken(answer.body)) {
      return { _tag: "Gone" }
    }
    if (status === 401 || status === 403) {
      return { _tag: "Dead", outcome: "config_error", reason: `${said}: check the FCM service account and its project` }
    }
  }
  return { _tag: "Dead", outcome: "rejected", reason: said }
}
