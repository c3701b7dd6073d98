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
import * as EventLog from "../log/EventLog.ts"

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
  /** Seconds since the event of the group's oldest pending delivery was committed; `null`: none pending. */
  readonly oldestPendingSeconds: number | null
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
    const cursors = yield* sql<CursorRow>`
      SELECT c.name, c.last_seq AS "lastSeq", s.value AS head, (s.value - c.last_seq)::float8 AS lag,
             c.updated_at AS "updatedAt", c.last_at::text AS "afterAt", s.last_at::text AS "headAt"
      FROM event_consumer_cursors AS c CROSS JOIN event_seq AS s
      ORDER BY c.name`
    return yield* Effect.forEach(cursors, ({ afterAt, headAt, ...cursor }) =>
      Effect.map(
        cursor.head > cursor.lastSeq
          ? sql<{ age: number }>`
              SELECT extract(epoch FROM clock_timestamp() - occurred_at)::float8 AS age FROM event_log
              WHERE ${EventLog.between(sql, { seq: cursor.lastSeq, at: afterAt }, { seq: cursor.head, at: headAt })}
              ORDER BY seq LIMIT 1`.unprepared
          : Effect.succeed([]),
        (rows): ConsumerStatus => ({ ...cursor, pendingAgeSeconds: rows[0]?.age ?? 0 }),
      ),
    )
  })

/** Jobs by state and kind, with the age of the oldest in each group. */
export const jobs = (sql: SqlClient.SqlClient) => sql<JobGroup>`
  SELECT state::text AS state, kind, count(*)::int AS count,
         GREATEST(0, extract(epoch FROM clock_timestamp() - min(CASE
           WHEN state = 'running' THEN attempted_at
           WHEN finalized_at IS NOT NULL THEN finalized_at
           ELSE scheduled_at END)))::float8 AS "oldestSeconds"
  FROM jobs GROUP BY state, kind ORDER BY kind, state`

/**
 * Each subscription's first pending delivery (its oldest: deliveries go out in seq order), found
 * through the index of pending deliveries; `d` names the delivery for the caller's columns.
 */
const firstPending = (sql: SqlClient.SqlClient) => sql`
  LEFT JOIN LATERAL (
    SELECT d.event_seq, d.attempts, d.last_status, d.last_error_class,
           GREATEST(0, extract(epoch FROM clock_timestamp() - COALESCE(d.event_at, d.created_at)))::float8 AS age
    FROM webhook_deliveries AS d
    WHERE d.subscription_id = s.id AND d.state = 'pending'
    ORDER BY d.event_seq LIMIT 1) AS p ON true`

const subscriptions = (sql: SqlClient.SqlClient) => sql<SubscriptionGroup>`
  SELECT s.state, s.disabled_cause AS cause, count(*)::int AS count, max(p.age) AS "oldestPendingSeconds"
  FROM webhook_subscriptions AS s ${firstPending(sql)}
  GROUP BY s.state, s.disabled_cause ORDER BY s.state, s.disabled_cause NULLS FIRST`

const oldestPending = (sql: SqlClient.SqlClient) => sql<PendingDelivery>`
  SELECT d.subscription_id::text AS subscription, d.event_seq AS "eventSeq",
         GREATEST(0, extract(epoch FROM clock_timestamp() - COALESCE(d.event_at, d.created_at)))::float8
           AS "ageSeconds"
  FROM webhook_deliveries AS d
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

export interface SubscriptionStatus {
  readonly id: string
  readonly owner: string
  readonly url: string
  readonly state: string
  readonly cause: string | null
  /** The oldest pending delivery: its event's seq, age in seconds, attempts so far and last outcome. */
  readonly pending: {
    readonly eventSeq: bigint
    readonly ageSeconds: number
    readonly attempts: number
    readonly lastStatus: number | null
    readonly lastErrorClass: string | null
  } | null
}

/**
 * Up to `limit` subscriptions, those that need a look first: disabled ones, then the oldest
 * pending delivery first. Every subscription is weighed (one index probe each), `limit` returned.
 */
export const subscriptionList = Effect.fn("Status.subscriptionList")(function* (limit: number) {
  const sql = yield* SqlClient.SqlClient
  const rows = yield* sql<{
    id: string
    owner: string
    url: string
    state: string
    cause: string | null
    eventSeq: bigint | null
    ageSeconds: number | null
    attempts: number | null
    lastStatus: number | null
    lastErrorClass: string | null
  }>`
    SELECT s.id::text AS id, s.owner, s.url, s.state, s.disabled_cause AS cause,
           p.event_seq AS "eventSeq", p.age AS "ageSeconds", p.attempts, p.last_status AS "lastStatus",
           p.last_error_class AS "lastErrorClass"
    FROM webhook_subscriptions AS s ${firstPending(sql)}
    ORDER BY s.state = 'disabled' DESC, p.age DESC NULLS LAST, s.created_at, s.id
    LIMIT ${limit}`
  return rows.map(
    ({ eventSeq, ageSeconds, attempts, lastStatus, lastErrorClass, ...s }): SubscriptionStatus => ({
      ...s,
      pending:
        eventSeq === null
          ? null
          : { eventSeq, ageSeconds: ageSeconds ?? 0, attempts: attempts ?? 0, lastStatus, lastErrorClass },
    }),
  )
})

export interface AttemptStatus {
  readonly deliveryId: bigint
  readonly number: number
  readonly startedAt: Date
  readonly durationMs: number
  /** The HTTP status, or `null` when no response came (`errorClass` says why). */
  readonly status: number | null
  readonly errorClass: string | null
  /** The start of the response body the receiver sent (at most 200 characters). */
  readonly responseBody: string | null
  readonly subscription: string
  readonly url: string
  readonly eventSeq: bigint
  readonly deliveryState: string
}

/**
 * The newest attempts, up to `limit`, by when they started, newest first: a retry of an old
 * delivery is as recent as it is, not filed behind the later deliveries' first attempts. The
 * index on `started_at` (migration 0020) makes it `limit` rows whatever the history's size; ties
 * go to the later delivery and attempt.
 */
export const recentAttempts = Effect.fn("Status.recentAttempts")(function* (limit: number) {
  const sql = yield* SqlClient.SqlClient
  return yield* sql<AttemptStatus>`
    SELECT a.delivery_id AS "deliveryId", a.number, a.started_at AS "startedAt", a.duration_ms AS "durationMs",
           a.status, a.error_class AS "errorClass", left(a.response_body, 200) AS "responseBody",
           d.subscription_id::text AS subscription, s.url, d.event_seq AS "eventSeq", d.state AS "deliveryState"
    FROM (
      SELECT * FROM webhook_attempts ORDER BY started_at DESC, delivery_id DESC, number DESC LIMIT ${limit}
    ) AS a
    JOIN webhook_deliveries AS d ON d.id = a.delivery_id
    JOIN webhook_subscriptions AS s ON s.id = d.subscription_id
    ORDER BY a.started_at DESC, a.delivery_id DESC, a.number DESC`
})

/** Reads the whole status; every part is one statement (the consumers' one per lagging consumer as well). Fails with `SchemaNotMigrated` on a database bothy never migrated. */
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
