/**
 * bothy's public API: the services a host app composes into its own Effect program.
 *
 * Chosen, not collected: each module a host uses is one namespace (`export * as`), and the modules
 * whose main export is a service of the same name give an explicit list instead, so `EventLog` is
 * the service itself while its SQL fragments and limits stay inside. What is not listed here is
 * internal and may change in any release; `etc/bothy.api.md` is the reviewed report of this surface,
 * and `ApiReportIsCurrent` fails when the two differ.
 */

export * as AdminApi from "./admin/AdminApi.ts"
export * as AdminAuth from "./admin/AdminAuth.ts"
export * as AdminServer from "./admin/AdminServer.ts"
export * as PermissionGrants from "./authz/PermissionGrants.ts"
export {
  type PermissionCheck,
  Permissions,
  type PermissionsInSql,
  type PermissionsShape,
  PermissionsUnavailable,
  permissionsUnavailable,
  pushDeliver,
  webhookDeliver,
} from "./authz/Permissions.ts"
export * as PermissionsMemory from "./authz/PermissionsMemory.ts"
export * as Consumer from "./consumer/Consumer.ts"
export * as SealingKeyCheck from "./crypto/SealingKeyCheck.ts"
export * as SecretBox from "./crypto/SecretBox.ts"
export * as JobBackoff from "./jobs/JobBackoff.ts"
export * as JobControl from "./jobs/JobControl.ts"
export * as JobKind from "./jobs/JobKind.ts"
export * as JobProgress from "./jobs/JobProgress.ts"
export { type Inserted, type InsertOptions, InvalidJob, JobInsert, Jobs } from "./jobs/Jobs.ts"
export * as JobWorker from "./jobs/JobWorker.ts"
export { Event, EventType, InvalidEvent, NewEvent } from "./log/Event.ts"
export {
  type AppendError,
  type Appended,
  AppendNotCommitted,
  appendLockKey,
  EventLog,
  EventLogPartitionMissing,
  type Head,
  type Position,
  type Sequenced,
  type Unsequenced,
} from "./log/EventLog.ts"
export * as EventLogPartitions from "./log/EventLogPartitions.ts"
export {
  EventTypeCatalog,
  EventTypeEntry,
  EventTypeNotFound,
  InvalidEventType,
  NewEventType,
} from "./log/EventTypeCatalog.ts"
export * as LogRewind from "./log/LogRewind.ts"
export * as Retention from "./log/Retention.ts"
export * as Sequencer from "./log/Sequencer.ts"
export * as RestoreFinalize from "./ops/RestoreFinalize.ts"
export * as TargetPolicyConfig from "./outbound/TargetPolicyConfig.ts"
export { BothyConfig, InvalidConfig, type LogSequencing, type Settings } from "./platform/BothyConfig.ts"
export * as Database from "./platform/Database.ts"
export * as DatabaseSchema from "./platform/DatabaseSchema.ts"
export * as DatabaseSessions from "./platform/DatabaseSessions.ts"
export * as EmbeddedPostgres from "./platform/EmbeddedPostgres.ts"
export * as Migrations from "./platform/Migrations.ts"
export { NotificationStream, type Wake, type Wakeups } from "./platform/NotificationStream.ts"
export * as PushAudience from "./push/PushAudience.ts"
export * as PushConfig from "./push/PushConfig.ts"
export * as PushDelivery from "./push/PushDelivery.ts"
export * as PushFanOut from "./push/PushFanOut.ts"
export * as PushRegistration from "./push/PushRegistration.ts"
export * as PushRegistrations from "./push/PushRegistrations.ts"
export * as PushVapid from "./push/PushVapid.ts"
export * as WebhookDrainer from "./webhooks/drain/WebhookDrainer.ts"
export * as WebhookSignature from "./webhooks/drain/WebhookSignature.ts"
export * as BulkRecovery from "./webhooks/subscriptions/BulkRecovery.ts"
export * as DeliveryHistory from "./webhooks/subscriptions/DeliveryHistory.ts"
export * as DeliveryResend from "./webhooks/subscriptions/DeliveryResend.ts"
export * as EventTypePatterns from "./webhooks/subscriptions/EventTypePatterns.ts"
export * as PayloadFilter from "./webhooks/subscriptions/PayloadFilter.ts"
export * as RecoveryFilter from "./webhooks/subscriptions/RecoveryFilter.ts"
export type { RetryNow } from "./webhooks/subscriptions/SubscriptionRetry.ts"
export {
  TestEventNeedsScope,
  type TestEventPayload,
  type TestEventSent,
} from "./webhooks/subscriptions/SubscriptionTestEvent.ts"
export * as WebhookDeliveries from "./webhooks/subscriptions/WebhookDeliveries.ts"
export * as WebhookSecret from "./webhooks/subscriptions/WebhookSecret.ts"
export {
  type EnableOptions,
  InvalidSubscription,
  type ListOptions,
  NewSubscription,
  type Subscription,
  SubscriptionNotFound,
  type SubscriptionPage,
  SubscriptionPatch,
  WebhookSubscriptions,
} from "./webhooks/subscriptions/WebhookSubscriptions.ts"
export * as WebhookConfig from "./webhooks/WebhookConfig.ts"
export * as WebhookFanOut from "./webhooks/WebhookFanOut.ts"
