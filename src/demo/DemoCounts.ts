/**
 * What the demo has seen, counted where it happens: events the producer appended, webhooks the
 * receiver got (and whether each signature verified), pushes the push service decrypted (or
 * could not), and what the APNs and FCM stand-ins accepted. Plain counters in one process, read by the progress line and the summary.
 */

export interface DemoCounts {
  appended: number
  /** Webhook requests whose signature verified (each a delivery done). */
  verified: number
  /** Webhook requests refused: bad or missing signature, unknown subscription. */
  webhookFailures: number
  /** Push messages that decrypted and carried a notification. */
  pushes: number
  /** APNs pushes the demo's APNs accepted (the provider token verified, a device it made). */
  apnsPushes: number
  /** FCM pushes the demo's FCM accepted (an access token it issued, a token it made). */
  fcmPushes: number
  /** Push messages refused (Web Push, APNs or FCM): no such registration, bad VAPID token, body that does not decrypt. */
  pushFailures: number
  /** Appends that failed (the producer goes on). */
  appendFailures: number
}

export const make = (): DemoCounts => ({
  appended: 0,
  verified: 0,
  webhookFailures: 0,
  pushes: 0,
  apnsPushes: 0,
  fcmPushes: 0,
  pushFailures: 0,
  appendFailures: 0,
})
