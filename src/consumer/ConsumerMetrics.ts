/**
 * The consumers' metric names, each defined once. Every metric carries a `consumer` attribute.
 * On the wire (`ops/MetricsEndpoint`) dots become underscores and counters end in `_total`.
 */
import { Metric } from "effect"

/** Head seq minus the consumer's `last_seq`. */
export const lag = Metric.gauge("bothy.event.consumer.lag", {
  description: "events committed to the log that the consumer has not processed yet",
})

/** Age in seconds of the oldest event the consumer has not processed; 0 when caught up. */
export const pendingAge = Metric.gauge("bothy.event.consumer.pending_age_seconds", {
  description: "age in seconds of the oldest unprocessed event (0 when caught up)",
})

export const rounds = Metric.counter("bothy.event.consumer.rounds", {
  description: "consumer rounds by outcome (Locked, CaughtUp, Processed, Failed)",
  incremental: true,
})

export const events = Metric.counter("bothy.event.consumer.events", {
  description: "events processed by consumer rounds",
  incremental: true,
})

export const lost = Metric.counter("bothy.event.consumer.lost_events", {
  description: "events that had left the log before the consumer read them",
  incremental: true,
})
