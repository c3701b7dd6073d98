/**
 * Bulk recovery: the deliveries a `RecoveryFilter` selects, across subscriptions, sent again by a
 * background job (`webhook.bulk-recover` on the `webhooks` queue), a bounded batch per transaction
 * (`BulkRecoveryBatch`); or, with `replayTo`, one subscription's range copied to a new
 * subscription at another URL.
 *
 * What it keeps true: a recovery is known by the id of the job that was inserted for it, and its
 * row (`webhook_recoveries`) holds the filter, the durable cursor and the counts, written by the
 * same transaction as each batch, so its progress can be read at any time, also after the job's
 * row is gone. Pausing ends the job after the batch in hand (cancelled, with the reason `paused`)
 * and keeps the cursor; resuming runs the job again from it (a new job if the paused one was
 * cleaned away). Nothing a paused, killed or resumed recovery does sends one delivery twice.
 *
 * A replay's new subscription copies the old one's owner, event types, scope, payload filter,
 * rate limit and headers, with the new URL and a new secret (shown once, in the answer). It is
 * disabled (cause `manual`) while the job seeds it with the range's deliveries, which it then
 * numbers from 1 as it sends them, in seq order; once seeded it is enabled from the head of the log
 * at its creation, so the range is followed by every event since.
 */
import { Clock, Duration, Effect, type Redacted, Schedule, Schema } from "effect"
import { SqlClient } from "effect/sql"
import * as JobControl from "../../jobs/JobControl.ts"
import * as JobKind from "../../jobs/JobKind.ts"
import * as Jobs from "../../jobs/Jobs.ts"
import { headSeq } from "../../log/EventLog.ts"
import { maxAttempts, queue } from "../drain/DrainJob.ts"
import { runBatch, selected } from "./BulkRecoveryBatch.ts"
import { runWaitingDrainer } from "./DeliveryResend.ts"
import * as RecoveryFilter from "./RecoveryFilter.ts"
import { stop } from "./SubscriptionStates.ts"
import { WebhookSubscriptions } from "./WebhookSubscriptions.ts"

export const kind = "webhook.bulk-recover"

/** Deliveries per batch (one transaction) unless told. */
export const defaultBatchSize = 500

/** How long one run goes on before it hands its slot back (a snooze of 0) and goes on in the next. */
const runSlice = 60_000

export const recoveryStates = ["running", "paused", "done"] as const

export interface Recovery {
  /** The id of the job first inserted for it: what the API answers, and how it is asked for. */
  readonly job: bigint
  /** The job that runs it now (the same, unless a resume had to insert a new one). */
  readonly currentJob: bigint
  readonly owner: string | null
  readonly filter: RecoveryFilter.StoredFilter
  /** The subscription a replay seeds; null for a resend. */
  readonly replayTo: string | null
  readonly state: (typeof recoveryStates)[number]
  /** Deliveries the filter selected when it was requested (new ones may turn up as it runs). */
  readonly total: number
  /** Deliveries the cursor has passed. */
  readonly examined: number
  /** Made pending again (a replay: copied to its subscription). */
  readonly resent: number
  /** Passed over: the subscription was disabled or gone, the event left the log, or its state changed. */
  readonly skipped: number
  readonly createdAt: Date
  readonly updatedAt: Date
  readonly finishedAt: Date | null
}

export class RecoveryNotFound extends Schema.TaggedError<RecoveryNotFound>()("RecoveryNotFound", {
  job: Schema.String,
}) {
  override get message() {
    return `no webhook recovery for job ${this.job}`
  }
}

export interface RequestOptions {
  /** A replay: the filter's one subscription's range goes to a new subscription at this URL. */
  readonly replayTo?: { readonly url: string } | undefined
  readonly batchSize?: number | undefined
}

export interface Requested {
  readonly job: bigint
  readonly total: number
  /** A replay's new subscription and its secret (shown once). */
  readonly replay?: { readonly subscription: string; readonly secret: Redacted.Redacted<string> } | undefined
}

const columns = (sql: SqlClient.SqlClient) => sql`
  id AS job, job_id AS "currentJob", owner, filter, replay_to::text AS "replayTo", state, total, examined, resent,
  skipped, created_at AS "createdAt", updated_at AS "updatedAt", finished_at AS "finishedAt"`

const insertJob = (sql: SqlClient.SqlClient) =>
  sql<{ id: bigint }>`
    WITH ${Jobs.insertCtes(
      sql,
      sql`(
        SELECT ${kind}::text AS kind, ${queue}::text AS queue, '{}'::jsonb AS args, NULL::int2 AS priority,
               ${maxAttempts}::int AS max_attempts, NULL::timestamptz AS scheduled_at, NULL::text AS unique_key,
               NULL::text AS trace_parent
      )`,
    )}
    SELECT (SELECT id FROM jobs_inserted) AS id, ${Jobs.insertCounts(sql)}`.pipe(Effect.map(([row]) => row!.id))

/** The new subscription of a replay of `from`, disabled until seeded; its id, secret and the head at its creation. */
const replaySubscription = (sql: SqlClient.SqlClient, from: string, url: string) =>
  Effect.gen(function* () {
    const webhooks = yield* WebhookSubscriptions
    const old = yield* webhooks.get(from)
    const created = yield* webhooks.create({
      owner: old.owner,
      url,
      eventTypes: old.eventTypes,
      scope: old.scope,
      rateLimit: old.rateLimit,
      headers: old.headers,
      filter: old.filter,
    })
    yield* stop([created.id], "manual")
    const [h] = yield* sql<{ head: bigint }>`SELECT ${headSeq(sql)} AS head`
    return { ...created, head: h!.head }
  })

/**
 * Checks the filter, and inserts the recovery and its job in one transaction; the job's id and
 * what it selects now. A replay names exactly one subscription in the filter.
 */
export const request = Effect.fn("BulkRecovery.request")(function* (
  filter: RecoveryFilter.RecoveryFilter,
  options: RequestOptions = {},
) {
  const sql = yield* SqlClient.SqlClient
  const replay = options.replayTo !== undefined
  const checked = RecoveryFilter.check(filter, replay)
  if (checked instanceof RecoveryFilter.InvalidRecoveryFilter) return yield* checked
  if (replay && checked.subscriptions.length !== 1) {
    return yield* new RecoveryFilter.InvalidRecoveryFilter({
      field: "subscriptions",
      reason: "BadValue",
      detail: "a replay names exactly one subscription, whose range it copies",
    })
  }
  const batchSize = options.batchSize ?? defaultBatchSize
  if (!Number.isInteger(batchSize) || batchSize < 1 || batchSize > 10_000) {
    return yield* new RecoveryFilter.InvalidRecoveryFilter({
      field: "batchSize",
      reason: "BadValue",
      detail: "must be an integer from 1 to 10000",
    })
  }
  return yield* sql.withTransaction(
    Effect.gen(function* () {
      const target =
        options.replayTo === undefined
          ? undefined
          : yield* replaySubscription(sql, checked.subscriptions[0]!, options.replayTo.url)
      const [count] = yield* sql<{ n: number }>`
        SELECT count(*)::int AS n ${selected(sql, checked, undefined)}`
      const job = yield* insertJob(sql)
      yield* sql`
        INSERT INTO webhook_recoveries (id, job_id, owner, filter, batch_size, replay_to, replay_from, total)
        VALUES (${job}, ${job}, ${checked.owner}, ${JSON.stringify(checked)}::jsonb, ${batchSize},
                ${target?.id ?? null}::uuid, ${target?.head ?? null}, ${count!.n})`
      return {
        job,
        total: count!.n,
        replay: target === undefined ? undefined : { subscription: target.id, secret: target.secret },
      } satisfies Requested
    }),
  )
})

/** The recovery asked for by its job's id (the first one's or the current one's). */
export const get = Effect.fn("BulkRecovery.get")(function* (job: bigint) {
  const sql = yield* SqlClient.SqlClient
  const [row] = yield* sql<Recovery>`
    SELECT ${columns(sql)} FROM webhook_recoveries WHERE id = ${job} OR job_id = ${job} ORDER BY id = ${job} DESC LIMIT 1`
  if (row === undefined) return yield* new RecoveryNotFound({ job: String(job) })
  return row
})

/** Pauses a running recovery: its job ends after the batch in hand, the cursor kept. A recovery that is not running is left as it is. */
export const pause = Effect.fn("BulkRecovery.pause")(function* (job: bigint) {
  const sql = yield* SqlClient.SqlClient
  const found = yield* get(job)
  yield* sql`UPDATE webhook_recoveries SET state = 'paused', updated_at = clock_timestamp()
             WHERE id = ${found.job} AND state = 'running'`
  return yield* get(found.job)
})

/**
 * Runs a paused recovery (or one whose job ended without finishing it, discarded after its
 * attempts) again from its cursor: its job runs again now, or a new job if that one was cleaned
 * away. A recovery that is done, or running with a live job, is left as it is.
 */
export const resume = Effect.fn("BulkRecovery.resume")(function* (job: bigint) {
  const sql = yield* SqlClient.SqlClient
  const found = yield* get(job)
  if (found.state === "done") return found
  if (found.state === "running") {
    const current = yield* JobControl.get(found.currentJob).pipe(Effect.option)
    // A running recovery whose job still lives goes on by itself; one whose job ended (discarded
    // after its attempts, or cleaned away) runs again.
    if (current._tag === "Some" && ["available", "scheduled", "running", "retryable"].includes(current.value.state)) {
      return found
    }
  }
  yield* sql`UPDATE webhook_recoveries SET state = 'running', updated_at = clock_timestamp() WHERE id = ${found.job}`
  yield* JobControl.retry(found.currentJob).pipe(
    // Still running: it is recording the stop it made when it saw the pause (it runs again once
    // that is recorded), or it never saw the pause and goes on by itself.
    Effect.retry({ schedule: Schedule.spaced("100 millis"), times: 50, while: (e) => e._tag === "JobStateConflict" }),
    Effect.catchTag("JobStateConflict", () => Effect.void),
    Effect.catchTag("JobNotFound", () =>
      Effect.flatMap(insertJob(sql), (id) => sql`UPDATE webhook_recoveries SET job_id = ${id} WHERE id = ${found.job}`),
    ),
  )
  return yield* get(found.job)
})

/** Runs batches for up to `runSlice`; a paused recovery ends the job as cancelled (resumable), a finished one as completed. */
const run = (job: JobKind.JobInfo) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const started = yield* Clock.currentTimeMillis
    for (;;) {
      const outcome = yield* runBatch(job.id, job.attempt)
      if (outcome._tag === "Stopped") {
        if (outcome.why === "paused") return yield* new JobKind.JobCancel({ reason: "paused: resume it to go on" })
        if (outcome.why === "missing") return yield* new JobKind.JobCancel({ reason: "no recovery for this job" })
        return
      }
      for (const sub of outcome.touched) yield* runWaitingDrainer(sql, sub)
      if (outcome.done) {
        const done = yield* get(job.id)
        return yield* Effect.logInfo(
          `webhooks: recovery ${done.job}: ${done.resent} deliveries ${done.replayTo === null ? "sent again" : `copied to subscription ${done.replayTo}`}, ${done.skipped} skipped`,
        )
      }
      if ((yield* Clock.currentTimeMillis) - started > runSlice) {
        return yield* new JobKind.JobSnooze({ delay: Duration.zero })
      }
    }
  })

/** The `webhook.bulk-recover` job kind, for the worker's `webhooks` queue. */
export const make = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  return JobKind.make({
    kind,
    args: Schema.Struct({}),
    run: (_args, job) => run(job).pipe(Effect.provideService(SqlClient.SqlClient, sql)),
  })
})
