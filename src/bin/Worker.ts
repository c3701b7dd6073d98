/**
 * What `bothy worker` runs, composed in one place (the only module besides a host app that knows
 * every part): retention of the log (partitions created ahead, old days detached and dropped), the
 * `webhooks` consumer, the `push` consumer with its registration sweep (when push is on), the
 * job runtime with the delivery jobs, and the admin API (`AdminServer`), over one connection pool
 * and one shared LISTEN connection. A log that goes back under it (a failover to a standby that
 * lacked the last commits) is finalized as a restore by the first round that finds it (`LogRewind`).
 * Nothing of it starts before the sealing key is checked against the database's (`SealingKeyCheck`).
 */
import { Effect, Layer, Option, type Redacted } from "effect"
import { AdminAuth } from "../admin/AdminAuth.ts"
import * as AdminServer from "../admin/AdminServer.ts"
import * as PermissionGrants from "../authz/PermissionGrants.ts"
import * as SealingKeyCheck from "../crypto/SealingKeyCheck.ts"
import { Jobs } from "../jobs/Jobs.ts"
import * as JobWorker from "../jobs/JobWorker.ts"
import { EventLog } from "../log/EventLog.ts"
import * as LogRewind from "../log/LogRewind.ts"
import * as Retention from "../log/Retention.ts"
import * as Sequencer from "../log/Sequencer.ts"
import * as RestoreFinalize from "../ops/RestoreFinalize.ts"
import { BothyConfig, type Settings } from "../platform/BothyConfig.ts"
import * as Database from "../platform/Database.ts"
import type { ListenAddress } from "../platform/ListenAddress.ts"
import { NotificationStream } from "../platform/NotificationStream.ts"
import * as PushAudience from "../push/PushAudience.ts"
import { PushConfig, type PushSettings } from "../push/PushConfig.ts"
import * as PushDelivery from "../push/PushDelivery.ts"
import * as PushFanOut from "../push/PushFanOut.ts"
import * as PushRegistrations from "../push/PushRegistrations.ts"
import * as WebhookDrainer from "../webhooks/drain/WebhookDrainer.ts"
import * as BulkRecovery from "../webhooks/subscriptions/BulkRecovery.ts"
import * as DeliveryHistory from "../webhooks/subscriptions/DeliveryHistory.ts"
import * as DeliveryResend from "../webhooks/subscriptions/DeliveryResend.ts"
import { WebhookSubscriptions } from "../webhooks/subscriptions/WebhookSubscriptions.ts"
import { deliveryDefaults, WebhookConfig, type WebhookSettings } from "../webhooks/WebhookConfig.ts"
import * as WebhookFanOut from "../webhooks/WebhookFanOut.ts"

/**
 * Drain runs in flight per worker process by default (`webhook.max_in_flight`; each subscription
 * still gets one request at a time). A run waiting on its endpoint holds no database connection,
 * so hundreds cost little; the per-owner cap (`webhook.owner_max_in_flight`) keeps one owner's
 * slow endpoints from taking them all.
 */
export const deliveryConcurrency = deliveryDefaults.maxInFlight

/**
 * The delivery jobs as the worker runs them, under the lease `jobs.lease`: the `webhooks` queue at `webhook.max_in_flight`, the
 * drain job with the per-owner cap and permission age from `WebhookConfig`, and the recovery jobs
 * (`webhook.recover`, `webhook.bulk-recover`) the admin API and CLI insert; and, when push is on,
 * the `push` queue at `push.max_in_flight` with the push jobs (`push.batch`, and `push.deliver` of earlier versions).
 */
export const deliveries = (push: Option.Option<PushSettings>, jobs?: Settings["jobs"]) =>
  Layer.unwrap(
    Effect.gen(function* () {
      const config = yield* WebhookConfig
      const drain = yield* WebhookDrainer.make
      const recover = yield* DeliveryResend.make
      const bulkRecover = yield* BulkRecovery.make
      const concurrency = config.maxInFlight ?? deliveryConcurrency
      const webhooks = {
        kinds: [drain, recover, bulkRecover],
        queues: { [WebhookFanOut.queue]: { concurrency } },
        ...(jobs === undefined ? {} : { lease: jobs.lease }),
      }
      if (Option.isNone(push)) return JobWorker.layer(webhooks)
      const deliver = yield* PushDelivery.make.pipe(Effect.provide(PushConfig.layerWith(push.value)))
      return JobWorker.layer({
        ...webhooks,
        kinds: [...webhooks.kinds, ...deliver],
        queues: { ...webhooks.queues, [PushFanOut.queue]: { concurrency: push.value.maxInFlight } },
      })
    }),
  )

/**
 * The `push` consumer and the sweep of stale registrations, when push is on. No cooldown: it
 * would hold every round back by up to `consumer.cooldown`, and the push handoff's target (commit to
 * job claimable, p95 50 ms in `npm run bench -- push`) is about that same size; push rounds are one
 * cheap statement, with no drainer to feed in batches.
 */
const pushConsumer = (settings: Settings, push: Option.Option<PushSettings>) =>
  Option.match(push, {
    onNone: () => Layer.empty,
    onSome: (push) =>
      Layer.merge(
        PushFanOut.layer({
          batchSize: settings.consumer.batchSize,
          pollInterval: settings.consumer.pollInterval,
        }),
        PushRegistrations.sweep,
      ).pipe(Layer.provide(Layer.merge(PushConfig.layerWith(push), PushAudience.layer))),
  })

/** Where the admin API listens, its operator token and body limit (`admin.address`, `admin.token`, `admin.max_body_bytes`). */
export interface AdminSettings {
  readonly address: ListenAddress
  readonly token: Option.Option<Redacted.Redacted<string>>
  /** Absent: 1 MiB. */
  readonly maxBodyBytes?: number
}

/** The admin API on its address, over the worker's pool and permissions; push registrations when push is on. */
const adminServer = (admin: AdminSettings, push: Option.Option<PushSettings>) =>
  AdminServer.layer(admin.address, admin.maxBodyBytes === undefined ? {} : { maxBodyBytes: admin.maxBodyBytes }).pipe(
    Layer.provide(WebhookSubscriptions.layer),
    Layer.provide(Layer.succeed(AdminAuth, AdminAuth.token(admin.token))),
    Layer.provide(Option.match(push, { onNone: () => Layer.empty, onSome: PushConfig.layerWith })),
  )

export const layer = (
  settings: Settings,
  webhooks: WebhookSettings,
  push: Option.Option<PushSettings> = Option.none(),
  admin: AdminSettings = { address: Option.none(), token: Option.none() },
) =>
  Layer.mergeAll(
    Retention.layer({ retention: settings.sync.eventRetention }),
    DeliveryHistory.layer({ age: webhooks.historyRetention ?? settings.sync.eventRetention }),
    settings.log?.sequencing === "post_commit" ? Sequencer.layer() : Layer.empty,
    WebhookFanOut.layer({
      batchSize: settings.consumer.batchSize,
      pollInterval: settings.consumer.pollInterval,
      cooldown: settings.consumer.cooldown,
    }),
    pushConsumer(settings, push),
    deliveries(push, settings.jobs),
    adminServer(admin, push),
  ).pipe(
    Layer.provide(SealingKeyCheck.layer(webhooks.secretKey)),
    Layer.provide(
      Layer.mergeAll(
        NotificationStream.layer(),
        EventLog.layerFor(settings.log?.sequencing ?? "counter"),
        Jobs.layer,
        PermissionGrants.layer,
        WebhookConfig.layerWith(webhooks),
        // A round that finds the log gone back under it (a failover that lost commits) finalizes it.
        LogRewind.layer(RestoreFinalize.recoverRewind),
      ),
    ),
    Layer.provide(Database.migrate),
    // Kept in the output: the command waits on `Database.DatabaseServer` besides its signals.
    Layer.provideMerge(Layer.merge(BothyConfig.layerWith(settings), Database.layer)),
  )
