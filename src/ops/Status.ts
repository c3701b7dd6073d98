/**
 * What an operator asks of a bothy database, read from the database alone (no worker needs to
 * run): each consumer's cursor, lag and pending age; jobs by state and kind; webhook subscriptions
 * by state and cause, and the oldest pending delivery; push registrations; the partitions ahead
 * and the oldest day kept. `bothy status` prints it, and `DatabaseGauges` turns it into gauges.
 *
 * Ages come from `clock_timestamp()` on the server, as every age in bothy's SQL does. The push
 * table lands with push: until then `pushRegistrations` is `null` ("no such table"), not 0.
 */
import { Effect, Schema } from "effect"
import { SqlClient } from "effect/sql"

export class SchemaNotMigrated extends Schema.TaggedError<SchemaNotMigrated>()("SchemaNotMigrated", {
  missing: Schema.String,
}) {
  override get message() {
    return `the database has no ${this.missing} table: it holds no bothy schema yet (bothy migrate, or a worker's start, applies it)`
  }
}

export interface ConsumerStatus {
  readonly name: string
  readonly lastSeq: bigint
  readonly head: bigint
  readonly lag: number
  /** Seconds since the oldest event the consumer has not processed was committed; 0 when caught up. */
  readonly pendingAgeSeconds: number
  readonly updatedAt: Date
}

export interface JobGroup {
  readonly state: string
  readonly kind: string
  readonly count: number
  /**
   * Seconds since the oldest of them entered its state as far as the row tells: the start of
   * its attempt for `running`, its schedule otherwise, its end once finalized.
   */
  readonly oldestSeconds: number
}

export interface SubscriptionGroup {
  readonly state: string
  /** `null` for active subscriptions. */
  readonly cause: string | null
  readonly count: number
}

export interface PendingDelivery {
  readonly subscription: string
  readonly eventSeq: bigint
  readonly ageSeconds: number
}

export interface Partitions {
  readonly count: number
  /** The oldest day (UTC, `YYYY-MM-DD`) a partition holds, or `null` with none. */
  readonly oldestDay: string | null
  /** The last day (UTC) a partition exists for. */
  readonly lastDay: string | null
  /** Whole days from today (UTC) to the last partition's day. */
  readonly daysAhead: number
  /** Seconds from now until appends would find no partition. */
  readonly runwaySeconds: number
}

export interface Status {
  readonly consumers: ReadonlyArray<ConsumerStatus>
  readonly jobs: ReadonlyArray<JobGroup>
  readonly subscriptions: ReadonlyArray<SubscriptionGroup>
  readonly oldestPendingDelivery: PendingDelivery | null
  readonly pushRegistrations: number | null
  readonly partitions: Partitions
}

/** The job states of the `job_state` enum, in their life's order. */
export { jobStates } from "../jobs/JobControl.ts"

/** Each consumer's cursor, lag and pending age, by name. */
export const consumers = (sql: SqlClient.SqlClient) => sql<ConsumerStatus>`
  SELECT c.name, c.last_seq AS "lastSeq", s.value AS head, (s.value - c.last_seq)::float8 AS lag,
         COALESCE(extract(epoch FROM clock_timestamp() - (
           SELECT occurred_at FROM event_log WHERE seq > c.last_seq ORDER BY seq LIMIT 1)), 0)::float8
           AS "pendingAgeSeconds",
         c.updated_at AS "updatedAt"
  FROM event_consumer_cursors AS c CROSS JOIN event_seq AS s
  ORDER BY c.name`

/** Jobs by state and kind, with the age of the oldest in each group. */
export const jobs = (sql: SqlClient.SqlClient) => sql<JobGroup>`
  SELECT state::text AS state, kind, count(*)::int AS count,
         GREATEST(0, extract(epoch FROM clock_timestamp() - min(CASE
           WHEN state = 'running' THEN attempted_at
           WHEN finalized_at IS NOT NULL THEN finalized_at
           ELSE scheduled_at END)))::float8 AS "oldestSeconds"
  FROM jobs GROUP BY state, kind ORDER BY kind, state`

const subscriptions = (sql: SqlClient.SqlClient) => sql<SubscriptionGroup>`
  SELECT state, disabled_cause AS cause, count(*)::int AS count
  FROM webhook_subscriptions GROUP BY state, disabled_cause ORDER BY state, disabled_cause NULLS FIRST`

const oldestPending = (sql: SqlClient.SqlClient) => sql<PendingDelivery>`
  SELECT d.subscription_id::text AS subscription, d.event_seq AS "eventSeq",
         GREATEST(0, extract(epoch FROM clock_timestamp() - COALESCE(e.occurred_at, d.created_at)))::float8
           AS "ageSeconds"
  FROM webhook_deliveries AS d
  LEFT JOIN event_log AS e ON e.seq = d.event_seq
  WHERE d.state = 'pending'
  ORDER BY d.created_at, d.id LIMIT 1`

// The table's name is a constant here; to_regclass makes its absence an answer, not an error.
const pushRegistrations = (sql: SqlClient.SqlClient) =>
  Effect.gen(function* () {
    const [exists] = yield* sql<{ present: boolean }>`
      SELECT to_regclass('push_registrations') IS NOT NULL AS present`
    if (exists?.present !== true) return null
    const [row] = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM push_registrations`
    return row?.n ?? 0
  })

// Partition bounds from the catalogue: `event_log_YYYYMMDD` holds that UTC day (migration 0001).
const partitions = (sql: SqlClient.SqlClient) =>
  Effect.map(
    sql<Partitions>`
      WITH days AS (
        SELECT to_date(substring(c.relname FROM 'event_log_(\\d{8})$'), 'YYYYMMDD') AS day
        FROM pg_inherits AS i
        JOIN pg_class AS c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'event_log'::regclass)
      SELECT count(day)::int AS count,
             to_char(min(day), 'YYYY-MM-DD') AS "oldestDay",
             to_char(max(day), 'YYYY-MM-DD') AS "lastDay",
             COALESCE(max(day) - (clock_timestamp() AT TIME ZONE 'UTC')::date, 0)::int AS "daysAhead",
             GREATEST(0, COALESCE(extract(epoch FROM
               ((max(day) + 1)::timestamp AT TIME ZONE 'UTC') - clock_timestamp()), 0))::float8
               AS "runwaySeconds"
      FROM days`,
    (rows) => rows[0]!,
  )

/** Reads the whole status; every part is one statement. Fails with `SchemaNotMigrated` on a database bothy never migrated. */
export const read = Effect.fn("Status.read")(function* () {
  const sql = yield* SqlClient.SqlClient
  const [schema] = yield* sql<{ present: boolean }>`SELECT to_regclass('event_consumer_cursors') IS NOT NULL AS present`
  if (schema?.present !== true) return yield* new SchemaNotMigrated({ missing: "event_consumer_cursors" })
  return {
    consumers: yield* consumers(sql),
    jobs: yield* jobs(sql),
    subscriptions: yield* subscriptions(sql),
    oldestPendingDelivery: (yield* oldestPending(sql))[0] ?? null,
    pushRegistrations: yield* pushRegistrations(sql),
    partitions: yield* partitions(sql),
  } satisfies Status as Status
})
