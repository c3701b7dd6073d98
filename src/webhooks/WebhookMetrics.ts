/** Outgoing webhook metric names, each defined once. */
import { Metric } from "effect"

/** By `outcome`: delivered, failed, gone, suppressed. */
export const attempts = Metric.counter("bothy.webhooks.attempts", {
  description: "webhook delivery attempts by outcome",
  incremental: true,
})

/** Milliseconds from the event's commit to the 2xx answer. */
export const latency = Metric.histogram("bothy.webhooks.delivery_latency_ms", {
  description: "milliseconds from an event's commit to its webhook's successful delivery",
  boundaries: Metric.exponentialBoundaries({ start: 1, factor: 2, count: 28 }),
})

/** Seconds since the oldest undelivered event of a subscription was committed, by `subscription`. */
export const headAge = Metric.gauge("bothy.webhooks.head_age", {
  description: "age in seconds of the oldest undelivered event per subscription",
})

/** By `cause`: gap, gone, failing, manual. */
export const disabled = Metric.counter("bothy.webhooks.subscriptions_disabled", {
  description: "webhook subscriptions disabled, by cause",
  incremental: true,
})

/** Deliveries that went dead without a request because the owner's right or the scope was gone. */
export const suppressed = Metric.counter("bothy.webhooks.suppressed", {
  description: "webhook deliveries suppressed at delivery time (permission or scope)",
  incremental: true,
})
