/**
 * bothy's schema migrations, applied by the `effect/sql` migrator in one locked transaction, so
 * concurrent starts are safe and a second run is a no-op.
 *
 * Migrations are imported statically rather than read from a folder at run time: the same record
 * then works from the TypeScript sources and from the built `dist/`, with no file-system service.
 * A test checks that every file in `migrations/` is listed here.
 */
import { Effect } from "effect"
import { Migrator } from "effect/sql"
import eventLog from "../../migrations/0001_event_log.ts"
import eventConsumerCursors from "../../migrations/0002_event_consumer_cursors.ts"
import jobs from "../../migrations/0003_jobs.ts"
import jobWorkers from "../../migrations/0004_job_workers.ts"
import permissionGrants from "../../migrations/0005_permission_grants.ts"
import webhooks from "../../migrations/0006_webhooks.ts"
import webhookDrains from "../../migrations/0007_webhook_drains.ts"
import webhookDrainRelease from "../../migrations/0008_webhook_drain_release.ts"
import webhookSentSequence from "../../migrations/0009_webhook_sent_sequence.ts"
import webhookSealingKey from "../../migrations/0010_webhook_sealing_key.ts"
import jobsAttemptInteger from "../../migrations/0011_jobs_attempt_integer.ts"
import push from "../../migrations/0012_push.ts"
import eventLogSequencing from "../../migrations/0013_event_log_sequencing.ts"
import retention from "../../migrations/0015_retention.ts"
import webhookOptions from "../../migrations/0016_webhook_options.ts"
import eventLogHourlyLeaves from "../../migrations/0017_event_log_hourly_leaves.ts"
import retentionLease from "../../migrations/0018_retention_lease.ts"
import jobWorkerBackend from "../../migrations/0019_job_worker_backend.ts"

export const migrations = {
  "0001_event_log": eventLog,
  "0002_event_consumer_cursors": eventConsumerCursors,
  "0003_jobs": jobs,
  "0004_job_workers": jobWorkers,
  "0005_permission_grants": permissionGrants,
  "0006_webhooks": webhooks,
  "0007_webhook_drains": webhookDrains,
  "0008_webhook_drain_release": webhookDrainRelease,
  "0009_webhook_sent_sequence": webhookSentSequence,
  "0010_webhook_sealing_key": webhookSealingKey,
  "0011_jobs_attempt_integer": jobsAttemptInteger,
  "0012_push": push,
  "0013_event_log_sequencing": eventLogSequencing,
  "0015_retention": retention,
  "0016_webhook_options": webhookOptions,
  "0017_event_log_hourly_leaves": eventLogHourlyLeaves,
  "0018_retention_lease": retentionLease,
  "0019_job_worker_backend": jobWorkerBackend,
} as const

/** The table in which the migrator records applied migrations. */
export const migrationsTable = "bothy_migrations"

/** Applies every pending migration; returns the ids and names it applied (empty when current). */
export const run = Migrator.make({})({
  loader: Migrator.fromRecord(migrations),
  table: migrationsTable,
}).pipe(Effect.withSpan("Migrations.run"))
