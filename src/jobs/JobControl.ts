/**
 * An operator's hands on the job table: list jobs, retry one now, cancel one. What the admin API
 * and the CLI call; the runtime itself never does.
 *
 * What it keeps true: a job that is running is never changed from here (its worker owns the row
 * until it records an outcome, compare-and-set on `state = 'running'`), so retry and cancel
 * refuse it with `JobRunning` rather than race the worker. A retry makes the job runnable at once
 * (an attempt more if it had none left) and wakes its queue, as an insert does; a cancel finalizes
 * a job that has not started, so it never runs.
 */
import { Effect, Schema } from "effect"
import { SqlClient } from "effect/sql"
import * as Jobs from "./Jobs.ts"

/** The states of the `job_state` enum, in their life's order. */
export const jobStates = [
  "available",
  "scheduled",
  "running",
  "retryable",
  "completed",
  "cancelled",
  "discarded",
] as const
export type JobState = (typeof jobStates)[number]

export interface JobRecord {
  readonly id: bigint
  readonly kind: string
  readonly queue: string
  readonly state: JobState
  readonly attempt: number
  readonly maxAttempts: number
  readonly priority: number
  readonly args: unknown
  readonly errors: unknown
  readonly createdAt: Date
  readonly scheduledAt: Date
  readonly attemptedAt: Date | null
  readonly finalizedAt: Date | null
}

export class JobNotFound extends Schema.TaggedError<JobNotFound>()("JobNotFound", { id: Schema.String }) {
  override get message() {
    return `no job ${this.id}`
  }
}

/** The job is in a state the change does not apply to (running, or already finished for a cancel). */
export class JobStateConflict extends Schema.TaggedError<JobStateConflict>()("JobStateConflict", {
  id: Schema.String,
  state: Schema.String,
  change: Schema.Literals(["retry", "cancel"]),
}) {
  override get message() {
    return this.state === "running"
      ? `job ${this.id} is running: it cannot be ${this.change === "retry" ? "retried" : "cancelled"} until its worker records an outcome`
      : `job ${this.id} is ${this.state}: only a job that has not started can be cancelled`
  }
}

export interface ListOptions {
  readonly state?: JobState | undefined
  readonly kind?: string | undefined
  /** Jobs with an id below this (the previous page's `next`); newest first. */
  readonly before?: bigint | undefined
  readonly limit: number
}

const columns = (sql: SqlClient.SqlClient) => sql`
  id, kind, queue, state::text AS state, attempt, max_attempts AS "maxAttempts", priority, args, errors,
  created_at AS "createdAt", scheduled_at AS "scheduledAt", attempted_at AS "attemptedAt", finalized_at AS "finalizedAt"`

/** Jobs of one state and kind (`groups`). */
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

/** Jobs by state and kind, with the age of the oldest in each group, by kind and state. */
export const groups = (sql: SqlClient.SqlClient) => sql<JobGroup>`
  SELECT state::text AS state, kind, count(*)::int AS count,
         GREATEST(0, extract(epoch FROM clock_timestamp() - min(CASE
           WHEN state = 'running' THEN attempted_at
           WHEN finalized_at IS NOT NULL THEN finalized_at
           ELSE scheduled_at END)))::float8 AS "oldestSeconds"
  FROM jobs GROUP BY state, kind ORDER BY kind, state`

/** One page of jobs, newest first, and the cursor of the next page (`null` after the last). */
export const list = Effect.fn("JobControl.list")(function* (options: ListOptions) {
  const sql = yield* SqlClient.SqlClient
  const rows = yield* sql<JobRecord>`
    SELECT ${columns(sql)} FROM jobs
    WHERE ${sql.and([
      options.state === undefined ? sql`true` : sql`state = ${options.state}::job_state`,
      options.kind === undefined ? sql`true` : sql`kind = ${options.kind}`,
      options.before === undefined ? sql`true` : sql`id < ${options.before}`,
    ])}
    ORDER BY id DESC LIMIT ${options.limit + 1}`
  const page = rows.slice(0, options.limit)
  return { jobs: page, next: rows.length > options.limit ? page.at(-1)!.id : null }
})

export const get = Effect.fn("JobControl.get")(function* (id: bigint) {
  const sql = yield* SqlClient.SqlClient
  const [row] = yield* sql<JobRecord>`SELECT ${columns(sql)} FROM jobs WHERE id = ${id}`
  if (row === undefined) return yield* new JobNotFound({ id: String(id) })
  return row
})

/**
 * One statement: the row as it was (`state`, none when there is no such job), and the change
 * applied when its state is one of `from`; the job's queue is woken when it became runnable.
 */
const change = (id: bigint, name: "retry" | "cancel", from: ReadonlyArray<JobState>) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const set =
      name === "retry"
        ? sql`state = 'available', scheduled_at = clock_timestamp(), finalized_at = NULL,
              max_attempts = greatest(j.max_attempts, j.attempt + 1)`
        : sql`state = 'cancelled', finalized_at = clock_timestamp()`
    const [row] = yield* sql<{ state: JobState }>`
      WITH was AS (SELECT id, state FROM jobs WHERE id = ${id} FOR UPDATE), changed AS (
        UPDATE jobs AS j SET ${set}
        FROM was WHERE j.id = was.id AND was.state IN ${sql.in(from)}
        RETURNING j.queue, j.state
      ), woken AS MATERIALIZED (
        SELECT pg_notify(${Jobs.channel}, queue) FROM changed WHERE state = 'available'
      )
      SELECT was.state::text AS state, (SELECT count(*) FROM woken)::int AS woken FROM was`
    if (row === undefined) return yield* new JobNotFound({ id: String(id) })
    if (!from.includes(row.state)) {
      return yield* new JobStateConflict({ id: String(id), state: row.state, change: name })
    }
    return row.state
  })

/** Runs the job now: any state but running (a finished one runs once more). Its state before. */
export const retry = Effect.fn("JobControl.retry")(function* (id: bigint) {
  return yield* change(id, "retry", ["available", "scheduled", "retryable", "completed", "cancelled", "discarded"])
})

/** Cancels a job that has not started (available, scheduled or retryable). Its state before. */
export const cancel = Effect.fn("JobControl.cancel")(function* (id: bigint) {
  return yield* change(id, "cancel", ["available", "scheduled", "retryable"])
})
