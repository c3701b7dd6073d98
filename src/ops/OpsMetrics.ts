/**
 * The metrics read from the database rather than counted by a process (`DatabaseGauges`), each
 * defined once. Every label takes its values from a set the schema fixes (job states and kinds,
 * subscription states and causes), never an id.
 */
import { Metric } from "effect"

/** By `state` and `kind`. */
export const jobs = Metric.gauge("bothy.jobs.rows", {
  description: "jobs in the jobs table by state and kind",
})

/** By `kind`; 0 with none running. */
export const oldestRunning = Metric.gauge("bothy.jobs.oldest_running_seconds", {
  description: "seconds since the oldest running attempt of a kind started (0 with none running)",
})

/** By `state` and `cause` (`none` for active ones). */
export const subscriptions = Metric.gauge("bothy.webhooks.subscriptions", {
  description: "webhook subscriptions by state and disabled cause",
})

export const oldestPendingDelivery = Metric.gauge("bothy.webhooks.oldest_pending_delivery_seconds", {
  description: "age in seconds of the oldest pending webhook delivery of any subscription (0 with none)",
})

export const pushRegistrations = Metric.gauge("bothy.push.registrations", {
  description: "push registrations stored",
})

export const partitionRunway = Metric.gauge("bothy.event_log.partition_runway_seconds", {
  description: "seconds until an append would find no event_log partition",
})

export const sampledAt = Metric.gauge("bothy.ops.sampled_at_seconds", {
  description: "unix time in seconds of the last successful read of the database gauges",
})
