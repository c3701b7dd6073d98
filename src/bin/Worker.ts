/**
 * What `bothy worker` runs, composed in one place (the only module besides a host app that knows
 * every part): log partition maintenance, the `webhooks` consumer, and the job runtime with the
 * webhook delivery job, over one connection pool and one shared LISTEN connection. Nothing of it
 * starts before the sealing key is checked against the database's (`SealingKeyCheck`).
 */
import { Effect, Layer } from "effect"
import { BothyConfig, type Settings } from "../BothyConfig.ts"
import * as Database from "../Database.ts"
import { EventLog } from "../EventLog.ts"
import * as EventLogPartitions from "../EventLogPartitions.ts"
import { Jobs } from "../Jobs.ts"
import * as JobWorker from "../JobWorker.ts"
import { NotificationStream } from "../NotificationStream.ts"
import * as PermissionGrants from "../PermissionGrants.ts"
import * as SealingKeyCheck from "../SealingKeyCheck.ts"
import { WebhookConfig, type WebhookSettings } from "../WebhookConfig.ts"
import * as WebhookDelivery from "../WebhookDelivery.ts"
import * as WebhooksConsumer from "../WebhooksConsumer.ts"

/** Concurrent deliveries per worker process (each subscription still gets one at a time). */
export const deliveryConcurrency = 10

const Deliveries = Layer.unwrap(
  Effect.map(WebhookDelivery.make, (kind) =>
    JobWorker.layer({ kinds: [kind], queues: { [WebhooksConsumer.queue]: { concurrency: deliveryConcurrency } } }),
  ),
)

export const layer = (settings: Settings, webhooks: WebhookSettings) =>
  Layer.mergeAll(
    EventLogPartitions.maintain,
    WebhooksConsumer.layer({
      batchSize: settings.consumer.batchSize,
      pollInterval: settings.consumer.pollInterval,
      cooldown: settings.consumer.cooldown,
    }),
    Deliveries,
  ).pipe(
    Layer.provide(SealingKeyCheck.layer),
    Layer.provide(
      Layer.mergeAll(
        NotificationStream.layer(),
        EventLog.layer,
        Jobs.layer,
        PermissionGrants.layer,
        WebhookConfig.layerWith(webhooks),
      ),
    ),
    Layer.provide(Database.migrate),
    // Kept in the output: the command waits on `Database.DatabaseServer` besides its signals.
    Layer.provideMerge(Layer.merge(BothyConfig.layerWith(settings), Database.layer)),
  )
