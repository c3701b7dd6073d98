/**
 * What an operator asks of a bothy database, read from the database alone (no worker needs to
 * run): each consumer's cursor, lag and pending age; jobs by state and kind; webhook subscriptions
 * by state and cause, and the oldest pending delivery; push registrations; the partitions ahead
 * and the oldest day kept. `bothy status` prints it, and `DatabaseGauges` turns it into gauges.
 *
 * Ages come from `clock_timestamp()` on the server, as every age in bothy's SQL does. The push
 * table lands with push: until then `pushRegistrations` is `null` ("no such table"), not 0.
 *
 * Each figure comes from the part that owns its tables (`ConsumerCursors.withHead`,
 * `EventLog.firstAgeBetween`, `JobControl.groups`, `WebhookStatus`, `PushRegistrations.count`,
 * `EventLogPartitions.attachedDays`); this module names no table of its own.
 */
import { Effect, Schema } from "effect"
import { SqlClient } from "effect/sql"
import * as ConsumerCursors from "../consumer/ConsumerCursors.ts"
import * as JobControl from "../jobs/JobControl.ts"
import * as EventLog from "../log/EventLog.ts"
import * as EventLogPartitions from "../log/EventLogPartitions.ts"
import * as PushRegistrations from "../push/PushRegistrations.ts"
import * as WebhookStatus from "../webhooks/WebhookStatus.ts"

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

export type JobGroup = JobControl.JobGroup

export type {
  AttemptStatus,
  PendingDelivery,
  SubscriptionGroup,
  SubscriptionStatus,
} from "../webhooks/WebhookStatus.ts"
export { recentAttempts, subscriptionList } from "../webhooks/WebhookStatus.ts"

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
  readonly subscriptions: ReadonlyArray<WebhookStatus.SubscriptionGroup>
  readonly oldestPendingDelivery: WebhookStatus.PendingDelivery | null
  readonly pushRegistrations: number | null
  readonly partitions: Partitions
}

/** The job states of the `job_state` enum, in their life's order. */
export { jobStates } from "../jobs/JobControl.ts"

interface CursorRow extends Omit<ConsumerStatus, "pendingAgeSeconds"> {
  /** Text, for `EventLog.between`. */
  readonly afterAt: string
  readonly headAt: string
}

/**
 * Each consumer's cursor, lag and pending age, by name. The age's event is looked up with the
 * cursor's and the head's times as parameters of a statement planned each time
 * (`EventLog.between`, as `EventLog.readFrom` reads), so it sets up only the leaves between them, not all of them.
 */
export const consumers = (sql: SqlClient.SqlClient) =>
  Effect.gen(function* () {
    const cursors: ReadonlyArray<CursorRow> = yield* ConsumerCursors.withHead(sql)
    return yield* Effect.forEach(cursors, ({ afterAt, headAt, ...cursor }) =>
      Effect.map(
        cursor.head > cursor.lastSeq
          ? EventLog.firstAgeBetween(sql, { seq: cursor.lastSeq, at: afterAt }, { seq: cursor.head, at: headAt })
          : Effect.succeed([]),
        (rows): ConsumerStatus => ({ ...cursor, pendingAgeSeconds: rows[0]?.age ?? 0 }),
      ),
    )
  })

/** Jobs by state and kind, with the age of the oldest in each group. */
export const jobs = JobControl.groups

// Partition bounds from the catalogue, each partition's day as the log names it.
const partitions = (sql: SqlClient.SqlClient) =>
  Effect.map(
    sql<Partitions>`
      WITH days AS (${EventLogPartitions.attachedDays(sql)})
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

/** Reads the whole status; every part is one statement (the consumers' one per lagging consumer as well). Fails with `SchemaNotMigrated` on a database bothy never migrated. */
export const read = Effect.fn("Status.read")(function* () {
  const sql = yield* SqlClient.SqlClient
  const [schema] = yield* sql<{ present: boolean }>`SELECT to_regclass('event_consumer_cursors') IS NOT NULL AS present`
  if (schema?.present !== true) return yield* new SchemaNotMigrated({ missing: "event_consumer_cursors" })
  return {
    consumers: yield* consumers(sql),
    jobs: yield* jobs(sql),
    subscriptions: yield* WebhookStatus.groups(sql),
    oldestPendingDelivery: (yield* WebhookStatus.oldestPending(sql))[0] ?? null,
    pushRegistrations: yield* PushRegistrations.count(sql),
    partitions: yield* partitions(sql),
  } satisfies Status as Status
})
