/**
 * The drain job as the `webhooks` round creates it and the worker runs it: kind `webhook.deliver`
 * on queue `webhooks`, one subscription per job (its args, `{ subscription }`). The round
 * (`WebhookFanOut`) and the drainer (`WebhookDrainer`) both take these from here, so neither
 * imports the other.
 */
import { Schema } from "effect"
import { Uuid } from "../../platform/Uuid.ts"

export const deliverKind = "webhook.deliver"
export const queue = "webhooks"
/** Job attempts for infrastructure errors; the delivery's own retries are snoozes (see WebhookSchedule). */
export const maxAttempts = 25

/** The drain job's arguments. */
export const DrainArgs = Schema.Struct({ subscription: Uuid })

/** The job that drains one subscription's pending deliveries. */
export const drainJob = (subscriptionId: string) => ({
  kind: deliverKind,
  queue,
  args: { subscription: subscriptionId },
  maxAttempts,
})
