/**
 * Inserting jobs. `insert` runs on whatever connection the caller's fiber holds: inside
 * `sql.withTransaction` it joins that transaction, so the rows commit or vanish with it, and so
 * does the `pg_notify('jobs', queue)` that wakes workers on commit.
 *
 * A batch is one statement, however many rows, passed as one typed array per column. Rows with a `uniqueKey` that already exists are
 * skipped (`ON CONFLICT DO NOTHING`) and counted in `bothy.jobs.insert.suppressed`.
 */
import { Context, Effect, Layer, Metric, Schema } from "effect"
import { SqlClient, type Statement } from "effect/sql"
import type { SqlError } from "effect/sql/SqlError"
import * as JobMetrics from "./JobMetrics.ts"
import { column } from "./SqlArrays.ts"

export const JobInsert = Schema.Struct({
  kind: Schema.String.check(Schema.isNonEmpty(), Schema.isMaxLength(128)),
  queue: Schema.optional(Schema.String.check(Schema.isNonEmpty(), Schema.isMaxLength(128))),
  args: Schema.Json,
  /** 1 (first) to 4 (last), as in River. */
  priority: Schema.optional(Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 4 }))),
  maxAttempts: Schema.optional(Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 1000 }))),
  /** Not claimable before this time. */
  scheduledAt: Schema.optional(Schema.Date),
  uniqueKey: Schema.optional(Schema.String.check(Schema.isNonEmpty())),
  traceParent: Schema.optional(Schema.NullOr(Schema.String)),
})
export type JobInsert = typeof JobInsert.Type

export class InvalidJob extends Schema.TaggedError<InvalidJob>()("InvalidJob", {
  index: Schema.Int,
  detail: Schema.String,
}) {
  override get message() {
    return `job ${this.index} rejected: ${this.detail}`
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

const validate = (jobs: ReadonlyArray<unknown>) =>
  Effect.forEach(jobs, (job, index) =>
    Effect.mapError(Effect.fromResult(decodeJob(job)), (e) => new InvalidJob({ index, detail: String(e) })),
  )

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

      const insert = Effect.fn("Jobs.insert")(function* (jobs: ReadonlyArray<JobInsert>, options?: InsertOptions) {
        const alongside = options?.alongside
        if (jobs.length === 0) {
          if (alongside !== undefined) yield* sql`${alongside}`
          return { inserted: 0, suppressed: 0 }
        }
        const valid = yield* validate(jobs)
        const also = alongside === undefined ? sql.literal("") : sql`, alongside AS (${alongside})`
        const [row] = yield* sql<{ inserted: number }>`
          WITH ins AS (
            INSERT INTO jobs (kind, queue, args, priority, max_attempts, scheduled_at, state, unique_key, trace_parent)
            SELECT k, coalesce(q, 'default'), a::jsonb, coalesce(p, 1), coalesce(m, 25), coalesce(s, clock_timestamp()),
                   CASE WHEN s > clock_timestamp() THEN 'scheduled' ELSE 'available' END::job_state, u, t
            FROM unnest(${column(valid, (j) => j.kind)}::text[], ${column(valid, (j: JobInsert) => j.queue)}::text[],
                        ${column(valid, (j) => JSON.stringify(j.args))}::text[],
                        ${column(valid, (j) => j.priority)}::int2[], ${column(valid, (j: JobInsert) => j.maxAttempts)}::int2[],
                        ${column(valid, (j) => j.scheduledAt)}::timestamptz[], ${column(valid, (j: JobInsert) => j.uniqueKey)}::text[],
                        ${column(valid, (j) => j.traceParent)}::text[]) AS r(k, q, a, p, m, s, u, t)
            ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL DO NOTHING
            RETURNING queue
          ), wake AS MATERIALIZED (
            SELECT pg_notify('jobs', queue) FROM (SELECT DISTINCT queue FROM ins) AS queues
          )${also}
          SELECT (SELECT count(*) FROM ins)::int AS inserted, (SELECT count(*) FROM wake)::int AS woken`
        const inserted = row!.inserted
        const suppressed = jobs.length - inserted
        if (suppressed > 0) yield* Metric.update(JobMetrics.insertSuppressed, suppressed)
        return { inserted, suppressed }
      })

      return Jobs.of({ insert })
    }),
  )
}
