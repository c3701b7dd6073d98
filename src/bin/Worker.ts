/**
 * What `bothy worker` runs, composed in one place (the only module besides a host app that knows
 * every part): log partition maintenance, the `webhooks` consumer, and the job runtime with the
 * webhook delivery job, over one connection pool and one shared LISTEN connection. Nothing of it
 * starts before the sealing key is checked against the database's (`SealingKeyCheck`).
 */
import { Effect, Layer } from "effect"
import * as PermissionGrants from "../authz/PermissionGrants.ts"
import * as SealingKeyCheck from "../crypto/SealingKeyCheck.ts"
import { Jobs } from "../jobs/Jobs.ts"
import * as JobWorker from "../jobs/JobWorker.ts"
import { EventLog } from "../log/EventLog.ts"
import * as EventLogPartitions from "../log/EventLogPartitions.ts"
import * as Sequencer from "../log/Sequencer.ts"
import { BothyConfig, type Settings } from "../platform/BothyConfig.ts"
import * as Database from "../platform/Database.ts"
import { NotificationStream } from "../platform/NotificationStream.ts"
import { deliveryDefaults, WebhookConfig, type WebhookSettings } from "../webhooks/WebhookConfig.ts"
import * as WebhookDrainer from "../webhooks/WebhookDrainer.ts"
import * as WebhookFanOut from "../webhooks/WebhookFanOut.ts"

/**
 * Drain runs in flight per worker process by default (`webhook.max_in_flight`; each subscription
 * still gets one request at a time). A run waiting on its endpoint holds no database connection,
 * so hundreds cost little; the per-owner cap (`webhook.owner_max_in_flight`) keeps one owner's
 * slow endpoints from taking them all.
 */
export const deliveryConcurrency = deliveryDefaults.maxInFlight

/**
 * The webhook delivery jobs as the worker runs them: the `webhooks` queue at `webhook.max_in_flight`,
 * the drain job with the per-owner cap and permission age from `WebhookConfig`.
 */
export const deliveries = Layer.unwrap(
  Effect.gen(function* () {
    const config = yield* WebhookConfig
    const kind = yield* WebhookDrainer.make
    const concurrency = config.maxInFlight ?? deliveryConcurrency
    return JobWorker.layer({ kinds: [kind], queues: { [WebhookFanOut.queue]: { concurrency } } })
  }),
)

export const layer = (settings: Settings, webhooks: WebhookSettings) =>
  Layer.mergeAll(
    EventLogPartitions.maintain,
    settings.log?.sequencing === "post_commit" ? Sequencer.layer() : Layer.empty,
    WebhookFanOut.layer({
      batchSize: settings.consumer.batchSize,
      pollInterval: settings.consumer.pollInterval,
      cooldown: settings.consumer.cooldown,
    }),
    deliveries,
  ).pipe(
    Layer.provide(SealingKeyCheck.layer(webhooks.secretKey)),
    Layer.provide(
      Layer.mergeAll(
        NotificationStream.layer(),
        EventLog.layerFor(settings.log?.sequencing ?? "counter"),
        Jobs.layer,
        PermissionGrants.layer,
        WebhookConfig.layerWith(webhooks),
      ),
    ),
    Layer.provide(Database.migrate),
    // Kept in the output: the command waits on `Database.DatabaseServer` besides its signals.
    Layer.provideMerge(Layer.merge(BothyConfig.layerWith(settings), Database.layer)),
  )
