/**
 * Inserting jobs. `insert` runs on whatever connection the caller's fiber holds: inside
 * `sql.withTransaction` it joins that transaction, so the rows commit or vanish with it, and so
 * does the `pg_notify('jobs', queue)` that wakes workers on commit.
 *
 * A batch is one statement, however many rows, passed as one typed array per column. Rows with a `uniqueKey` that already exists are
 * skipped (`ON CONFLICT DO NOTHING`) and counted in `bothy.jobs.insert.suppressed`. The same insert,
 * as CTEs (`insertCtes`), lets a statement of another part create jobs from its own rows (a
 * consumer's one-statement round): one INSERT, one unique key rule, one NOTIFY, all here.
 *
 * Every row is validated before the statement, so one bad row inserts nothing: an `InvalidJob`
 * names the row and the field (`kind`, `args.to[2]`), including text PostgreSQL cannot hold (NUL,
 * an unpaired surrogate) anywhere in the args, keys too, and args nested deeper than
 * `maxArgsDepth`, which would otherwise be an `SqlError` or a stack overflow.
 */
import { Context, Effect, Layer, Metric, Option, Result, Schema } from "effect"
import { SqlClient, type Statement } from "effect/sql"
import type { SqlError } from "effect/sql/SqlError"
import { firstIssue } from "../platform/FieldIssue.ts"
import { column } from "../platform/SqlArrays.ts"
import * as StorableJson from "../platform/StorableJson.ts"
import { storableCheck } from "../platform/StorableText.ts"
import * as JobMetrics from "./JobMetrics.ts"

/**
 * The NOTIFY channel on which a commit that made jobs runnable wakes the fetchers of their queue
 * (the payload is the queue's name). Every statement of this part that makes a job runnable
 * notifies on it; `JobFetcher` listens.
 */
export const channel = "jobs"

/**
 * "The job `id` is live": it exists in a state that will still run (or is running), so whatever it
 * holds stays held. `id` is a value or a fragment naming a column. Completed jobs are deleted and
 * cancelled or discarded ones never run again, so neither holds anything.
 */
export const isLive = (sql: SqlClient.SqlClient, id: bigint | Statement.Fragment) => sql`EXISTS (
  SELECT 1 FROM jobs AS live WHERE live.id = ${id} AND live.state IN ('available', 'scheduled', 'running', 'retryable')
)`

/**
 * The job insert as CTEs of a caller's statement (`Jobs.insert`, a consumer's one-statement round):
 * `jobs_inserted` inserts `rows`, a subquery or CTE with the columns kind, queue, args (jsonb),
 * priority, max_attempts, scheduled_at, unique_key and trace_parent (a NULL takes the default),
 * skipping rows whose unique key exists (it returns `id` and `queue` of each row it inserted); `jobs_woken` sends the `jobs` NOTIFY of each queue that got
 * a row, at commit. Nothing here validates `rows`: that is the caller's part (`insert` decodes every
 * row first). The statement's final SELECT must list `insertCounts`, which is what makes
 * `jobs_woken` run (a SELECT in WITH runs only as far as the statement reads it).
 */
export const insertCtes = (sql: SqlClient.SqlClient, rows: Statement.Fragment) => sql`
  jobs_inserted AS (
    INSERT INTO jobs (kind, queue, args, priority, max_attempts, scheduled_at, state, unique_key, trace_parent)
    SELECT r.kind, coalesce(r.queue, 'default'), r.args, coalesce(r.priority, 1), coalesce(r.max_attempts, 25),
           coalesce(r.scheduled_at, clock_timestamp()),
           CASE WHEN r.scheduled_at > clock_timestamp() THEN 'scheduled' ELSE 'available' END::job_state,
           r.unique_key, r.trace_parent
    FROM ${rows} AS r
    ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL DO NOTHING
    RETURNING id, queue
  ), jobs_woken AS MATERIALIZED (
    SELECT pg_notify(${channel}, queue) FROM (SELECT DISTINCT queue FROM jobs_inserted) AS queues
  )`

/**
 * An SQL condition for another part's statement (the `jobs` table is this part's own): the job
 * whose id is `job` has been claimed again after `attempt`, so the run that holds `attempt` is
 * stale and must not act beside the later one.
 */
export const attemptedAfter = (sql: SqlClient.SqlClient, job: Statement.Fragment, attempt: number) =>
  sql`EXISTS (SELECT 1 FROM jobs AS j WHERE j.id = ${job} AND j.attempt > ${attempt})`

/**
 * An SQL condition: the job whose id is `job` waits for its time (scheduled, or retryable after a
 * failure), so `JobControl.retry` would make it runnable at once.
 */
export const isWaiting = (sql: SqlClient.SqlClient, job: Statement.Fragment) =>
  sql`EXISTS (SELECT 1 FROM jobs AS j WHERE j.id = ${job} AND j.state IN ('scheduled', 'retryable'))`

/** The columns `inserted` and `woken` (queues notified) for the final SELECT of a statement with `insertCtes`. */
export const insertCounts = (sql: SqlClient.SqlClient) =>
  sql`(SELECT count(*) FROM jobs_inserted)::int AS inserted, (SELECT count(*) FROM jobs_woken)::int AS woken`

/** Counts rows an insert skipped for an existing unique key (`bothy.jobs.insert.suppressed`). */
export const countSuppressed = (suppressed: number) =>
  suppressed > 0 ? Metric.update(JobMetrics.insertSuppressed, suppressed) : Effect.void

/** How deep arrays and objects may nest in a job's args. */
export const maxArgsDepth = 64
/** Values in a job's args, counted as JSON writes them. */
export const maxArgsValues = 1_000_000
/** A unique key stays well inside the 2,704 bytes a btree index entry may take (3 bytes per code unit at most). */
export const maxUniqueKeyLength = 512

const Name = Schema.String.check(Schema.isNonEmpty(), Schema.isMaxLength(128), storableCheck)

// Dates PostgreSQL's timestamptz and the ISO form both hold; JavaScript's go further both ways.
const Instant = Schema.Date.check(
  Schema.isBetweenDate({ minimum: new Date("0001-01-01T00:00:00Z"), maximum: new Date("9999-12-31T23:59:59.999Z") }),
)

export const JobInsert = Schema.Struct({
  kind: Name,
  queue: Schema.optional(Name),
  args: Schema.Json,
  /** 1 (first) to 4 (last), as in River. */
  priority: Schema.optional(Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 4 }))),
  maxAttempts: Schema.optional(Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 1000 }))),
  /** Not claimable before this time. */
  scheduledAt: Schema.optional(Instant),
  uniqueKey: Schema.optional(
    Schema.String.check(Schema.isNonEmpty(), Schema.isMaxLength(maxUniqueKeyLength), storableCheck),
  ),
  traceParent: Schema.optional(Schema.NullOr(Schema.String.check(Schema.isMaxLength(256), storableCheck))),
})
export type JobInsert = typeof JobInsert.Type

export class InvalidJob extends Schema.TaggedError<InvalidJob>()("InvalidJob", {
  /** Position of the offending job in the batch that was refused. */
  index: Schema.Int,
  /** The offending field (`kind`, `args.to[2]`), or empty when the row itself is not an object. */
  field: Schema.String,
  detail: Schema.String,
}) {
  override get message() {
    return `job ${this.index} rejected${this.field === "" ? "" : ` at ${this.field}`}: ${this.detail}`
  }
}

export interface Inserted {
  readonly inserted: number
  /** Rows skipped because their unique key already existed. */
  readonly suppressed: number
}

export interface InsertOptions {
  /**
   * A data-modifying statement run as part of the insert statement (a consumer's cursor update,
   * say): one round trip instead of two. It runs even when `jobs` is empty.
   */
  readonly alongside?: Statement.Fragment
}

const decodeJob = Schema.decodeUnknownResult(JobInsert)

const validateOne = (job: unknown, index: number): Effect.Effect<JobInsert, InvalidJob> => {
  const decoded = decodeJob(job)
  if (Result.isFailure(decoded)) return Effect.fail(new InvalidJob({ index, ...firstIssue(decoded.failure) }))
  const problem = StorableJson.check(decoded.success.args, "args", { maxDepth: maxArgsDepth, maxValues: maxArgsValues })
  return Option.isSome(problem)
    ? Effect.fail(new InvalidJob({ index, field: problem.value.field, detail: problem.value.detail }))
    : Effect.succeed(decoded.success)
}

const validate = (jobs: ReadonlyArray<unknown>) => Effect.forEach(jobs, validateOne)

export class Jobs extends Context.Service<
  Jobs,
  {
    /** Inserts the rows in one statement, in the caller's transaction if there is one. */
    readonly insert: (
      jobs: ReadonlyArray<JobInsert>,
      options?: InsertOptions,
    ) => Effect.Effect<Inserted, InvalidJob | SqlError>
  }
>()("bothy/Jobs") {
  static readonly layer = Layer.effect(
    Jobs,
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      // At 0 from the start, so that a scrape holds it before any insert was a duplicate.
      yield* Metric.update(JobMetrics.insertSuppressed, 0)

      const insert = Effect.fn("Jobs.insert")(function* (jobs: ReadonlyArray<JobInsert>, options?: InsertOptions) {
        const alongside = options?.alongside
        if (jobs.length === 0) {
          if (alongside !== undefined) yield* sql`${alongside}`
          return { inserted: 0, suppressed: 0 }
        }
        const valid = yield* validate(jobs)
        const also = alongside === undefined ? sql.literal("") : sql`, alongside AS (${alongside})`
        const [row] = yield* sql<{ inserted: number }>`
          WITH ${insertCtes(
            sql,
            sql`(
              SELECT k AS kind, q AS queue, a::jsonb AS args, p AS priority, m AS max_attempts, s AS scheduled_at,
                     u AS unique_key, t AS trace_parent
              FROM unnest(${column(valid, (j) => j.kind)}::text[], ${column(valid, (j: JobInsert) => j.queue)}::text[],
                          ${column(valid, (j) => JSON.stringify(j.args))}::text[],
                          ${column(valid, (j) => j.priority)}::int2[], ${column(valid, (j: JobInsert) => j.maxAttempts)}::int4[],
                          ${column(valid, (j) => j.scheduledAt)}::timestamptz[], ${column(valid, (j: JobInsert) => j.uniqueKey)}::text[],
                          ${column(valid, (j) => j.traceParent)}::text[]) AS r(k, q, a, p, m, s, u, t)
            )`,
          )}${also}
          SELECT ${insertCounts(sql)}`
        const inserted = row!.inserted
        const suppressed = jobs.length - inserted
        yield* countSuppressed(suppressed)
        return { inserted, suppressed }
      })

      return Jobs.of({ insert })
    }),
  )
}
