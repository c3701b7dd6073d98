/** Push metric names, each defined once. */
import { Effect, Metric } from "effect"

/**
 * By `outcome`: delivered, gone (404/410: the registration was removed), unregistered (removed
 * before the send), payload_too_large (413), config_error (400/401/403: a wrong VAPID key or
 * payload format; pages), rejected (any other refusal), denied (no `push.deliver` right), expired
 * (the TTL passed), retried (5xx or network), throttled (429), blocked (the endpoint's address is
 * refused by the outbound policy).
 */
export const deliveries = Metric.counter("bothy.push.deliveries", {
  description: "push delivery attempts by outcome",
  incremental: true,
})

/**
 * Native push messages by `provider` (apns, fcm) and `outcome` (the values of `deliveries`): what
 * a request to APNs or FCM came to. They are not counted in `deliveries` as well, which counts Web
 * Push requests and, for every kind, what ends before a request (unregistered, denied, expired), so
 * each configuration error pages once, under the alert of its kind. `config_error` here is a key
 * or service account refused, a provider without credentials, or a worker on the wrong APNs
 * environment.
 */
export const nativeDeliveries = Metric.counter("bothy.push.native_deliveries", {
  description: "native push (APNs, FCM) delivery attempts by provider and outcome",
  incremental: true,
})

export const providers = ["apns", "fcm"] as const

/** By `cause`: gone (the push service said so), stale (not refreshed for push.registration_max_age). */
export const registrationsRemoved = Metric.counter("bothy.push.registrations_removed", {
  description: "push registrations removed, by cause",
  incremental: true,
})

/** Seconds from the event's commit to the push service's acceptance of its message. */
export const handoffLatency = Metric.histogram("bothy.push.handoff_latency_seconds", {
  description: "seconds from an event's commit to the push service accepting its message",
  boundaries: Metric.exponentialBoundaries({ start: 0.001, factor: 2, count: 24 }),
})

/** Events that left the log before the `push` consumer read them: their notifications were never made. */
export const eventsLost = Metric.counter("bothy.push.events_lost", {
  description: "events that left the log before their push notifications were made (never replayed)",
  incremental: true,
})

/** The values of `deliveries`' `outcome` label. */
export const deliveryOutcomes = [
  "delivered",
  "gone",
  "unregistered",
  "payload_too_large",
  "config_error",
  "rejected",
  "denied",
  "expired",
  "retried",
  "throttled",
  "blocked",
] as const

/** The values of `registrationsRemoved`' `cause` label. */
export const removalCauses = ["gone", "stale"] as const

/**
 * Every push series at 0 (the histogram with no observation), each counter with every value of its
 * label, so that a worker running push holds them in its first scrape, before any message was sent
 * or any registration removed.
 */
export const atZero = Effect.gen(function* () {
  for (const outcome of deliveryOutcomes) yield* Metric.update(Metric.withAttributes(deliveries, { outcome }), 0)
  for (const provider of providers) {
    for (const outcome of deliveryOutcomes) {
      yield* Metric.update(Metric.withAttributes(nativeDeliveries, { provider, outcome }), 0)
    }
  }
  for (const cause of removalCauses) yield* Metric.update(Metric.withAttributes(registrationsRemoved, { cause }), 0)
  yield* Metric.update(eventsLost, 0)
  yield* Metric.value(handoffLatency)
})

export type Outcome = (typeof deliveryOutcomes)[number]

/** Counts `n` push messages that ended as `outcome`. */
export const count = (outcome: Outcome, n = 1) => Metric.update(Metric.withAttributes(deliveries, { outcome }), n)

/** Counts a native message that ended as `outcome`, by its provider. */
export const countNative = (provider: (typeof providers)[number], outcome: Outcome) =>
  Metric.update(Metric.withAttributes(nativeDeliveries, { provider, outcome }), 1)
