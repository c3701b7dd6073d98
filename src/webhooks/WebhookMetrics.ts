/**
 * Outgoing webhook metric names, each defined once. On the wire (`ops/MetricsEndpoint`) dots
 * become underscores and counters end in `_total`; durations are in seconds. No metric carries a
 * per-subscription label: series must not grow with the number of subscriptions.
 */
import { Effect, Metric } from "effect"

/** By `outcome`: delivered, failed, gone, suppressed, unknown (a request a stopped worker may have sent). */
export const attempts = Metric.counter("bothy.webhooks.attempts", {
  description: "webhook delivery attempts by outcome",
  incremental: true,
})

/** Seconds from the event's commit to the 2xx answer: 1 ms to about 37 hours. */
export const latency = Metric.histogram("bothy.webhooks.delivery_latency_seconds", {
  description: "seconds from an event's commit to its webhook's successful delivery",
  boundaries: Metric.exponentialBoundaries({ start: 0.001, factor: 2, count: 28 }),
})

/**
 * At each failed request, how long the subscription's oldest undelivered event has waited: a
 * histogram instead of a gauge per subscription, so series stay bounded (1 s to about 6 days;
 * `bothy status` names the subscriptions).
 */
export const failingHeadAge = Metric.histogram("bothy.webhooks.failing_head_age_seconds", {
  description: "age in seconds of a subscription's oldest undelivered event, observed at each failed request",
  boundaries: Metric.exponentialBoundaries({ start: 1, factor: 2, count: 20 }),
})

/** By `cause`: gap, gone, failing, manual. */
export const disabled = Metric.counter("bothy.webhooks.subscriptions_disabled", {
  description: "webhook subscriptions disabled, by cause",
  incremental: true,
})

/** By `change`: degraded, recovered (`SubscriptionHealth`). */
export const healthChanges = Metric.counter("bothy.webhooks.subscription_health_changes", {
  description: "webhook subscriptions that became degraded or recovered, by change",
  incremental: true,
})

/** Active subscriptions flagged degraded, sampled from the database (`DatabaseGauges`). */
export const degraded = Metric.gauge("bothy.webhooks.subscriptions_degraded", {
  description: "active webhook subscriptions whose failure rate over the window is above the threshold",
})

/** The values of `healthChanges`' `change` label. */
export const healthChangeKinds = ["degraded", "recovered"] as const

/** Deliveries that went dead without a request because the owner's right or the scope was gone. */
export const suppressed = Metric.counter("bothy.webhooks.suppressed", {
  description: "webhook deliveries suppressed at delivery time (permission or scope)",
  incremental: true,
})

/** The values of `attempts`' `outcome` label. */
export const attemptOutcomes = ["delivered", "failed", "gone", "suppressed"] as const

/** The values of `disabled`'s `cause` label (`SubscriptionStates.DisabledCause`). */
export const disabledCauses = ["gap", "gone", "failing", "manual"] as const

/**
 * Every webhook series at 0 (histograms with no observation), each counter with every value of its
 * label, so that a worker's first scrape holds them before anything was delivered or disabled.
 */
export const atZero = Effect.gen(function* () {
  for (const outcome of attemptOutcomes) yield* Metric.update(Metric.withAttributes(attempts, { outcome }), 0)
  for (const cause of disabledCauses) yield* Metric.update(Metric.withAttributes(disabled, { cause }), 0)
  for (const change of healthChangeKinds) yield* Metric.update(Metric.withAttributes(healthChanges, { change }), 0)
  yield* Metric.update(suppressed, 0)
  yield* Metric.value(latency)
  yield* Metric.value(failingHeadAge)
})
