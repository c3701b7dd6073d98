/**
 * bothy's public API: the services a host app composes into its own Effect program.
 */
export * from "./BothyConfig.ts"
export * as Consumer from "./Consumer.ts"
export * as ConsumerMetrics from "./ConsumerMetrics.ts"
export * as ConsumerRound from "./ConsumerRound.ts"
export * as Database from "./Database.ts"
export * as EmbeddedPostgres from "./EmbeddedPostgres.ts"
export * from "./Event.ts"
export * from "./EventLog.ts"
export * as EventLogPartitions from "./EventLogPartitions.ts"
export * as JobMetrics from "./JobMetrics.ts"
export * from "./Jobs.ts"
export * as Migrations from "./Migrations.ts"
export * from "./NotificationStream.ts"
