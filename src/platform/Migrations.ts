/**
 * bothy's schema migrations, applied by the `effect/sql` migrator in one locked transaction, so
 * concurrent starts are safe and a second run is a no-op.
 *
 * Migrations are imported statically rather than read from a folder at run time: the same record
 * then works from the TypeScript sources and from the built `dist/`, with no file-system service.
 * A test checks that every file in `migrations/` is listed here.
 *
 * Only `run` changes the schema (`bothy migrate`, `bothy worker`, a host's start). Commands that
 * work on a database some fleet runs (the admin CLI) `check` instead: a newer bothy must never
 * migrate a database under workers that do not know the new schema.
 */
import { Effect, Schema } from "effect"
import { Migrator, SqlClient } from "effect/sql"
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
import webhookAttemptsStarted from "../../migrations/0020_webhook_attempts_started.ts"
import webhookFilters from "../../migrations/0021_webhook_filters.ts"
import eventTypes from "../../migrations/0022_event_types.ts"
import pushNativeRegistrations from "../../migrations/0023_push_native_registrations.ts"
import webhookDegraded from "../../migrations/0024_webhook_degraded.ts"
import webhookRecoveries from "../../migrations/0025_webhook_recoveries.ts"
import webhookEndpointAuth from "../../migrations/0026_webhook_endpoint_auth.ts"
import eventLogInPlace from "../../migrations/0027_event_log_in_place.ts"
import * as DatabaseSchema from "./DatabaseSchema.ts"
import * as PostgresVersion from "./PostgresVersion.ts"

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
  "0020_webhook_attempts_started": webhookAttemptsStarted,
  "0021_webhook_filters": webhookFilters,
  "0022_event_types": eventTypes,
  "0023_push_native_registrations": pushNativeRegistrations,
  "0024_webhook_degraded": webhookDegraded,
  "0025_webhook_recoveries": webhookRecoveries,
  "0026_webhook_endpoint_auth": webhookEndpointAuth,
  "0027_event_log_in_place": eventLogInPlace,
} as const

/** The table in which the migrator records applied migrations. */
export const migrationsTable = "bothy_migrations"

/**
 * Applies every pending migration; returns the ids and names it applied (empty when current).
 * Refuses a server older than bothy supports first (`PostgresVersionUnsupported`), so a host app
 * that migrates on its own pool gets that line rather than a migration failing halfway. With a
 * named schema (`DatabaseSchema`) it creates the schema when missing and checks the connections
 * find it first, before anything else is created.
 */
export const run = PostgresVersion.check().pipe(
  Effect.andThen(DatabaseSchema.prepare),
  Effect.andThen(
    Migrator.make({})({
      loader: Migrator.fromRecord(migrations),
      table: migrationsTable,
    }),
  ),
  Effect.withSpan("Migrations.run"),
)

/**
 * The database lacks migrations this bothy has (`missing`, by name, in order): a command that does
 * not migrate refuses to work on it.
 */
export class SchemaNotCurrent extends Schema.TaggedError<SchemaNotCurrent>()("SchemaNotCurrent", {
  missing: Schema.Array(Schema.String),
}) {
  override get message() {
    const [first, ...more] = this.missing
    const which =
      more.length === 0
        ? `migration ${first} is not applied`
        : `migrations ${first} to ${more.at(-1)} (${this.missing.length}) are not applied`
    return `the database schema is older than this bothy: ${which}; run \`bothy migrate\` first (this command never changes the schema)`
  }
}

/**
 * The migrations `run` would apply now, by name: those above the highest id the database records
 * (the migrator's own rule), all of them on a database bothy never migrated.
 */
export const pending = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const [table] = yield* sql<{ present: boolean }>`SELECT to_regclass(${migrationsTable}) IS NOT NULL AS present`
  const applied =
    table?.present === true
      ? ((yield* sql<{ id: number | null }>`SELECT max(migration_id) AS id FROM ${sql(migrationsTable)}`)[0]?.id ?? 0)
      : 0
  return Object.keys(migrations).filter((name) => Number(name.slice(0, 4)) > applied)
}).pipe(Effect.withSpan("Migrations.pending"))

/**
 * Fails with `SchemaNotCurrent`, naming what is missing, unless every migration of this bothy is
 * applied; first, with a named schema, checks the connections find it (`DatabaseSchema.verify`).
 */
export const check = DatabaseSchema.verify.pipe(
  Effect.andThen(pending),
  Effect.flatMap((missing) => (missing.length === 0 ? Effect.void : Effect.fail(new SchemaNotCurrent({ missing })))),
)
