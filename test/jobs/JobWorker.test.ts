import { PgClient } from "@effect/sql-pg"
import { assert, layer } from "@effect/vitest"
import { Clock, Context, Duration, Effect, Layer, Queue, Redacted, Schema } from "effect"
import { SqlClient, Statement } from "effect/sql"
import { TestClock } from "effect/testing"
import * as JobBackoff from "../../src/jobs/JobBackoff.ts"
import { claim } from "../../src/jobs/JobClaim.ts"
import type * as JobCompleter from "../../src/jobs/JobCompleter.ts"
import { type Finished, finalize } from "../../src/jobs/JobFinalize.ts"
import * as JobKind from "../../src/jobs/JobKind.ts"
import * as JobLease from "../../src/jobs/JobLease.ts"
import { Jobs } from "../../src/jobs/Jobs.ts"
import * as JobWorker from "../../src/jobs/JobWorker.ts"
import { NotificationStream } from "../../src/platform/NotificationStream.ts"
import * as TestDatabase from "../support/TestDatabase.ts"

const Live = Layer.mergeAll(Jobs.layer, NotificationStream.layer()).pipe(Layer.provideMerge(TestDatabase.layer()))

interface Row {
  readonly state: string
  readonly attempt: number
  readonly maxAttempts: number
  readonly scheduledAt: Date
  readonly finalizedAt: Date | null
  readonly errors: ReadonlyArray<{ readonly attempt: number; readonly kind: string; readonly message: string }>
}

const rows = (kind: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql<Row>`
      SELECT state::text, attempt, max_attempts AS "maxAttempts", scheduled_at AS "scheduledAt",
             finalized_at AS "finalizedAt", errors
      FROM jobs WHERE kind = ${kind} ORDER BY id`,
  )

const row = (kind: string) => Effect.map(rows(kind), (rs) => rs[0]!)

type Batch = ReadonlyArray<JobCompleter.Reported>

/** Starts a worker in the current scope; every recorded batch of outcomes arrives on the queue. */
const startWorker = (kinds: JobWorker.JobWorkerOptions<never>["kinds"], queue: string) =>
  Effect.gen(function* () {
    const finalized = yield* Queue.unbounded<Batch>()
    const context = yield* Layer.build(
      JobWorker.layer({
        kinds,
        queues: { [queue]: { concurrency: 4 } },
        onFinalized: (batch) => Queue.offer(finalized, batch).pipe(Effect.asVoid),
      }),
    )
    return { finalized, worker: Context.get(context, JobWorker.JobWorker) }
  })

const nextOutcome = (finalized: Queue.Dequeue<Batch>) =>
  Effect.map(Queue.take(finalized), (batch) => {
    assert.strictEqual(batch.length, 1)
    assert.strictEqual(batch[0]!.recorded, "applied")
    return batch[0]!.outcome
  })

layer(Live, { excludeTestServices: true })("JobWorker", (it) => {
  it.effect("JobsRetryBackoffWithTestClock: retried on schedule by TestClock, discarded after max_attempts", () =>
    Effect.gen(function* () {
      yield* TestClock.setTime(Date.now())
      const jobs = yield* Jobs
      const ran = yield* Queue.unbounded<{ attempt: number; at: number }>()
      const failing = JobKind.make({
        kind: "always.fails",
        args: Schema.Struct({}),
        retryDelay: JobBackoff.exponential({ base: "10 seconds", factor: 2, cap: "1 hour", jitter: 0 }),
        run: (_, job) =>
          Effect.gen(function* () {
            yield* Queue.offer(ran, { attempt: job.attempt, at: yield* Clock.currentTimeMillis })
            return yield* Effect.fail(`attempt ${job.attempt} failed`)
          }),
      })
      const t0 = yield* Clock.currentTimeMillis
      yield* jobs.insert([
        { kind: "always.fails", queue: "backoff", args: {}, maxAttempts: 4, scheduledAt: new Date(t0) },
      ])
      const { finalized } = yield* startWorker([failing], "backoff")

      assert.strictEqual((yield* Queue.take(ran)).attempt, 1)
      const first = yield* nextOutcome(finalized)
      assert.strictEqual(first._tag, "Retry")
      let r = yield* row("always.fails")
      assert.strictEqual(r.state, "retryable")
      assert.strictEqual(r.scheduledAt.getTime(), t0 + 10_000)

      let expectedAt = t0
      for (const [attempt, delay] of [
        [2, 10_000],
        [3, 20_000],
        [4, 40_000],
      ] as const) {
        expectedAt += delay
        yield* TestClock.adjust(Duration.millis(delay - 1000))
        assert.strictEqual(yield* Queue.size(ran), 0, `attempt ${attempt} not before its time`)
        yield* TestClock.adjust("1 second")
        const next = yield* Queue.take(ran)
        assert.strictEqual(next.attempt, attempt)
        assert.isAtLeast(next.at, expectedAt)
        const outcome = yield* nextOutcome(finalized)
        assert.strictEqual(outcome._tag, attempt < 4 ? "Retry" : "Discarded")
      }
      r = yield* row("always.fails")
      assert.strictEqual(r.state, "discarded")
      assert.isNotNull(r.finalizedAt)
      assert.deepStrictEqual(
        r.errors.map((e) => [e.attempt, e.kind, e.message]),
        [1, 2, 3, 4].map((n) => [n, "failure", `attempt ${n} failed`]),
      )
    }).pipe(Effect.scoped, Effect.provide(TestClock.layer())),
  )

  it.effect("JobsCancelIsDeadWithReason: a cancelled job is dead with its reason and never runs again", () =>
    Effect.gen(function* () {
      const jobs = yield* Jobs
      const kind = JobKind.make({
        kind: "revoked",
        args: Schema.Struct({}),
        run: () => Effect.fail(new JobKind.JobCancel({ reason: "permission revoked" })),
      })
      yield* jobs.insert([{ kind: "revoked", queue: "cancel", args: {}, maxAttempts: 5 }])
      const { finalized } = yield* startWorker([kind], "cancel")
      assert.strictEqual((yield* nextOutcome(finalized))._tag, "Cancelled")
      const r = yield* row("revoked")
      assert.strictEqual(r.state, "cancelled")
      assert.strictEqual(r.attempt, 1, "no retry although attempts were left")
      assert.isNotNull(r.finalizedAt)
      assert.deepStrictEqual(
        r.errors.map((e) => [e.kind, e.message]),
        [["cancelled", "permission revoked"]],
      )
    }).pipe(Effect.scoped),
  )

  it.effect("JobsSnoozeKeepsAttempt: a snoozed job runs again later without spending an attempt", () =>
    Effect.gen(function* () {
      yield* TestClock.setTime(Date.now())
      const jobs = yield* Jobs
      const ran = yield* Queue.unbounded<number>()
      const kind = JobKind.make({
        kind: "snoozer",
        args: Schema.Struct({}),
        run: (_, job) =>
          Effect.gen(function* () {
            yield* Queue.offer(ran, job.attempt)
            if (job.attempt === 1) return yield* new JobKind.JobSnooze({ delay: Duration.seconds(30) })
          }),
      })
      const t0 = yield* Clock.currentTimeMillis
      yield* jobs.insert([{ kind: "snoozer", queue: "snooze", args: {}, maxAttempts: 3, scheduledAt: new Date(t0) }])
      const { finalized } = yield* startWorker([kind], "snooze")
      assert.strictEqual(yield* Queue.take(ran), 1)
      assert.strictEqual((yield* nextOutcome(finalized))._tag, "Snooze")
      const snoozed = yield* row("snoozer")
      assert.strictEqual(snoozed.state, "scheduled")
      assert.strictEqual(snoozed.scheduledAt.getTime(), t0 + 30_000)
      assert.strictEqual(snoozed.maxAttempts - snoozed.attempt, 3, "as many attempts left as before it ran")
      assert.deepStrictEqual(snoozed.errors, [], "a snooze is not an error")
      yield* TestClock.adjust("29 seconds")
      assert.strictEqual(yield* Queue.size(ran), 0)
      yield* TestClock.adjust("1 second")
      yield* Queue.take(ran)
      assert.strictEqual((yield* nextOutcome(finalized))._tag, "Completed")
      assert.deepStrictEqual(yield* rows("snoozer"), [], "completed, so deleted")
    }).pipe(Effect.scoped, Effect.provide(TestClock.layer())),
  )

  it.effect(
    "JobsRetryDelayCountsFailuresNotSnoozes: a job that snoozed eight times and then fails is retried after the first step of its backoff, not the ninth (a busy webhook drainer snoozes at every run bound: one failure must not park it for an hour; found by the chaos run)",
    () =>
      Effect.gen(function* () {
        yield* TestClock.setTime(Date.now())
        const jobs = yield* Jobs
        const ran = yield* Queue.unbounded<number>()
        const kind = JobKind.make({
          kind: "busy.then.fails",
          args: Schema.Struct({}),
          retryDelay: JobBackoff.exponential({ base: "10 seconds", factor: 2, cap: "1 hour", jitter: 0 }),
          run: (_, job) =>
            Effect.gen(function* () {
              yield* Queue.offer(ran, job.attempt)
              if (job.attempt <= 8) return yield* new JobKind.JobSnooze({ delay: Duration.zero })
              return yield* Effect.fail(`attempt ${job.attempt} failed`)
            }),
        })
        const t0 = yield* Clock.currentTimeMillis
        yield* jobs.insert([
          { kind: "busy.then.fails", queue: "busy", args: {}, maxAttempts: 3, scheduledAt: new Date(t0) },
        ])
        const { finalized } = yield* startWorker([kind], "busy")
        for (let attempt = 1; attempt <= 8; attempt++) {
          assert.strictEqual(yield* Queue.take(ran), attempt)
          assert.strictEqual((yield* nextOutcome(finalized))._tag, "Snooze")
        }
        assert.strictEqual(yield* Queue.take(ran), 9)
        assert.strictEqual((yield* nextOutcome(finalized))._tag, "Retry")
        const first = yield* row("busy.then.fails")
        assert.strictEqual(first.scheduledAt.getTime(), t0 + 10_000, "the first failure waits the first step")
        yield* TestClock.adjust("10 seconds")
        assert.strictEqual(yield* Queue.take(ran), 10)
        assert.strictEqual((yield* nextOutcome(finalized))._tag, "Retry")
        const second = yield* row("busy.then.fails")
        assert.strictEqual(second.scheduledAt.getTime(), t0 + 10_000 + 20_000, "the second failure waits the second")
        assert.strictEqual(second.maxAttempts - second.attempt, 1, "two of its three attempts spent")
      }).pipe(Effect.scoped, Effect.provide(TestClock.layer())),
  )

  it.effect("JobsSnoozeZeroWakesWorkers: a job snoozed without delay runs again at once, not at the next poll", () =>
    Effect.gen(function* () {
      // TestClock never advances here, so the poll never fires: only the NOTIFY can wake the worker.
      yield* TestClock.setTime(Date.now())
      const jobs = yield* Jobs
      const ran = yield* Queue.unbounded<number>()
      const kind = JobKind.make({
        kind: "yielder",
        args: Schema.Struct({}),
        run: (_, job) =>
          Effect.gen(function* () {
            yield* Queue.offer(ran, job.attempt)
            if (job.attempt === 1) return yield* new JobKind.JobSnooze({ delay: Duration.zero })
          }),
      })
      const t0 = yield* Clock.currentTimeMillis
      yield* jobs.insert([{ kind: "yielder", queue: "yield", args: {}, scheduledAt: new Date(t0) }])
      const { finalized } = yield* startWorker([kind], "yield")
      assert.strictEqual(yield* Queue.take(ran), 1)
      assert.strictEqual((yield* nextOutcome(finalized))._tag, "Snooze")
      assert.strictEqual(yield* Queue.take(ran), 2)
      assert.strictEqual((yield* nextOutcome(finalized))._tag, "Completed")
    }).pipe(Effect.scoped, Effect.provide(TestClock.layer())),
  )

  it.effect("JobsBadArgsDiscarded: args that do not decode discard the job at once, with the error", () =>
    Effect.gen(function* () {
      const jobs = yield* Jobs
      const ran = yield* Queue.unbounded<number>()
      const kind = JobKind.make({
        kind: "typed",
        args: Schema.Struct({ n: Schema.Number }),
        run: ({ n }) => Queue.offer(ran, n).pipe(Effect.asVoid),
      })
      yield* jobs.insert([{ kind: "typed", queue: "badargs", args: { n: "not a number" }, maxAttempts: 25 }])
      const { finalized } = yield* startWorker([kind], "badargs")
      assert.strictEqual((yield* nextOutcome(finalized))._tag, "Discarded")
      const r = yield* row("typed")
      assert.strictEqual(r.state, "discarded")
      assert.strictEqual(r.attempt, 1, "never retried")
      assert.strictEqual(r.errors[0]!.kind, "bad_args")
      assert.include(r.errors[0]!.message, "args do not decode")
      assert.strictEqual(yield* Queue.size(ran), 0, "the job never ran")
    }).pipe(Effect.scoped),
  )

  it.effect("JobsTimeoutRetried: an attempt past its kind's timeout is interrupted and retried as a timeout", () =>
    Effect.gen(function* () {
      const jobs = yield* Jobs
      const interrupted = yield* Queue.unbounded<number>()
      const kind = JobKind.make({
        kind: "slow",
        args: Schema.Struct({}),
        timeout: "200 millis",
        retryDelay: () => Duration.millis(10),
        run: (_, job) =>
          job.attempt === 1
            ? Effect.never.pipe(Effect.onInterrupt(() => Queue.offer(interrupted, job.attempt)))
            : Effect.void,
      })
      // A unique key keeps the completed row, and with it the first attempt's error.
      yield* jobs.insert([{ kind: "slow", queue: "timeout", args: {}, maxAttempts: 3, uniqueKey: "slow:1" }])
      const { finalized } = yield* startWorker([kind], "timeout")
      const first = yield* nextOutcome(finalized)
      assert.strictEqual(first._tag, "Retry")
      assert.strictEqual(yield* Queue.take(interrupted), 1, "the attempt was interrupted")
      assert.strictEqual((yield* nextOutcome(finalized))._tag, "Completed")
      const r = yield* row("slow")
      assert.deepStrictEqual([r.state, r.attempt], ["completed", 2])
      assert.deepStrictEqual(
        r.errors.map((e) => [e.attempt, e.kind]),
        [[1, "timeout"]],
      )
    }).pipe(Effect.scoped),
  )

  it.effect(
    "JobsPrefetchBoundedByConcurrency: held jobs start as slots free, never more than concurrency at once",
    () =>
      Effect.gen(function* () {
        const jobs = yield* Jobs
        const ran = yield* Queue.unbounded<number>()
        let runningNow = 0
        let mostAtOnce = 0
        const kind = JobKind.make({
          kind: "prefetched",
          args: Schema.Struct({ n: Schema.Number }),
          run: ({ n }) =>
            Effect.gen(function* () {
              mostAtOnce = Math.max(mostAtOnce, ++runningNow)
              yield* Effect.sleep("5 millis")
              runningNow--
              yield* Queue.offer(ran, n)
            }),
        })
        yield* jobs.insert(
          Array.from({ length: 40 }, (_, n) => ({ kind: "prefetched", queue: "prefetch", args: { n } })),
        )
        yield* Layer.build(JobWorker.layer({ kinds: [kind], queues: { prefetch: { concurrency: 2, prefetch: 5 } } }))
        const seen = yield* Effect.forEach(Array.from({ length: 40 }), () => Queue.take(ran))
        assert.deepStrictEqual(
          [...seen].sort((a, b) => a - b),
          Array.from({ length: 40 }, (_, n) => n),
          "each job ran once",
        )
        assert.strictEqual(mostAtOnce, 2, "held jobs wait for a slot")
      }).pipe(Effect.scoped),
  )

  it.effect("JobsPrefetchTimeoutFreesSlot: a held job still runs when the one before it in its slot times out", () =>
    Effect.gen(function* () {
      const jobs = yield* Jobs
      const sql = yield* SqlClient.SqlClient
      const kind = JobKind.make({
        kind: "mixed",
        args: Schema.Struct({ hang: Schema.Boolean }),
        timeout: "200 millis",
        run: ({ hang }) => (hang ? Effect.never : Effect.void),
      })
      yield* jobs.insert([
        { kind: "mixed", queue: "slot", args: { hang: true }, maxAttempts: 1, priority: 1 },
        ...Array.from({ length: 3 }, () => ({ kind: "mixed", queue: "slot", args: { hang: false }, priority: 2 })),
      ])
      const { finalized } = yield* Effect.gen(function* () {
        const finalized = yield* Queue.unbounded<Batch>()
        yield* Layer.build(
          JobWorker.layer({
            kinds: [kind],
            queues: { slot: { concurrency: 1, prefetch: 3 } },
            onFinalized: (batch) => Queue.offer(finalized, batch).pipe(Effect.asVoid),
          }),
        )
        return { finalized }
      })
      let outcomes: Array<string> = []
      while (outcomes.length < 4) outcomes = [...outcomes, ...(yield* Queue.take(finalized)).map((f) => f.outcome._tag)]
      assert.deepStrictEqual(outcomes.sort(), ["Completed", "Completed", "Completed", "Discarded"])
      const states = yield* sql<{ hang: boolean; state: string }>`
        SELECT (args->>'hang')::boolean AS hang, state::text FROM jobs WHERE kind = 'mixed' ORDER BY id`
      assert.deepStrictEqual(
        states.map((r) => [r.hang, r.state]),
        [[true, "discarded"]],
        "the completed ones are deleted",
      )
    }).pipe(Effect.scoped),
  )

  it.effect("JobsPrefetchReleasedOnShutdown: shutdown puts held jobs back unstarted, their attempt not spent", () =>
    Effect.gen(function* () {
      const jobs = yield* Jobs
      const sql = yield* SqlClient.SqlClient
      const started = yield* Queue.unbounded<number>()
      const kind = JobKind.make({
        kind: "held",
        args: Schema.Struct({ n: Schema.Number }),
        run: ({ n }) => Effect.andThen(Queue.offer(started, n), Effect.never),
      })
      yield* jobs.insert(Array.from({ length: 6 }, (_, n) => ({ kind: "held", queue: "held", args: { n } })))
      yield* Effect.scoped(
        Effect.gen(function* () {
          yield* Layer.build(
            JobWorker.layer({
              kinds: [kind],
              queues: { held: { concurrency: 2, prefetch: 3 } },
              shutdownTimeout: "100 millis",
            }),
          )
          yield* Queue.take(started)
          yield* Queue.take(started)
          const states = yield* sql<{ state: string; n: number }>`
            SELECT state::text, count(*)::int AS n FROM jobs WHERE kind = 'held' GROUP BY 1 ORDER BY 1`
          assert.deepStrictEqual(
            states.map((r) => [r.state, r.n]),
            [
              ["available", 1],
              ["running", 5],
            ],
            "two slots plus three held claimed, the sixth left",
          )
        }),
      )
      assert.strictEqual(yield* Queue.size(started), 0, "the held jobs never started")
      const after = yield* sql<{ state: string; left: number; errors: ReadonlyArray<{ message: string }> }>`
        SELECT state::text, max_attempts - attempt AS left, errors FROM jobs WHERE kind = 'held' ORDER BY id`
      assert.deepStrictEqual(
        after.map((r) => [r.state, r.left]),
        Array.from({ length: 6 }, () => ["available", 25]),
        "all back, as many attempts left as before",
      )
      const messages = after.flatMap((r) => r.errors.map((e) => e.message)).sort()
      assert.deepStrictEqual(messages, [
        ...Array.from({ length: 3 }, () => "the worker shut down before it started the job"),
        ...Array.from({ length: 2 }, () => "the worker shut down while the job ran"),
      ])
    }),
  )

  it.effect(
    "JobsClaimAnswerLostIsPutBack: a claim that committed but whose answer never came (its connection cut) is put back by its own worker, whose lease stays live, and runs",
    () =>
      Effect.gen(function* () {
        const jobs = yield* Jobs
        const sql = yield* SqlClient.SqlClient
        const ran = yield* Queue.unbounded<number>()
        const kind = JobKind.make({
          kind: "answer_lost",
          args: Schema.Struct({}),
          run: (_, job) => Queue.offer(ran, job.attempt).pipe(Effect.asVoid),
        })
        yield* jobs.insert([{ kind: "answer_lost", queue: "answer_lost", args: {}, uniqueKey: "answer_lost:1" }])
        // The first claim runs for real, then its answer is lost: the rows are committed as the
        // worker's, and the worker sees a failure.
        let cut = true
        const cutAfterClaim: Statement.Transformer = (self) => {
          const [text, params] = self.compile()
          if (!cut || !/SET state = 'running'/.test(text) || !/answer_lost/.test(JSON.stringify(params)))
            return Effect.succeed(self)
          cut = false
          return sql
            .unsafe(text, params)
            .pipe(
              Effect.orDie,
              Effect.andThen(Effect.die(new Error("the connection was cut before the claim's answer came"))),
            )
        }
        const finalized = yield* Queue.unbounded<Batch>()
        yield* Layer.build(
          JobWorker.layer({
            kinds: [kind],
            queues: { answer_lost: { concurrency: 2 } },
            lease: "600 millis",
            pollInterval: "50 millis",
            onFinalized: (batch) => Queue.offer(finalized, batch).pipe(Effect.asVoid),
          }),
        ).pipe(Effect.provideService(Statement.CurrentTransformer, cutAfterClaim))
        // Run by a later claim, after the worker put it back: its first attempt spent, not run.
        // Bounded, so that without the put-back the test fails rather than hangs.
        assert.strictEqual(yield* Queue.take(ran).pipe(Effect.timeout("20 seconds")), 2)
        assert.strictEqual((yield* nextOutcome(finalized))._tag, "Completed")
        const r = yield* row("answer_lost")
        assert.deepStrictEqual([r.state, r.attempt], ["completed", 2])
        assert.deepStrictEqual(
          r.errors.map((e) => [e.attempt, e.kind]),
          [[1, "rescued"]],
        )
        assert.match(r.errors[0]!.message, /never got the claim's answer/)
        assert.isFalse(cut, "the claim was cut")
      }).pipe(Effect.scoped),
  )

  it.effect("JobsClaimSameMillisecond: a job inserted within the millisecond of the claim's clock is claimed", () =>
    Effect.gen(function* () {
      const jobs = yield* Jobs
      const sql = yield* SqlClient.SqlClient
      yield* jobs.insert([{ kind: "instant", queue: "instant", args: {} }])
      // The row's time has microseconds; the worker's clock reads the same millisecond, truncated.
      const [at] = yield* sql<{ ms: Date; us: number }>`
        UPDATE jobs SET scheduled_at = date_trunc('milliseconds', scheduled_at) + interval '700 microseconds'
        WHERE kind = 'instant'
        RETURNING date_trunc('milliseconds', scheduled_at) AS ms,
                  extract(microseconds FROM scheduled_at)::int % 1000 AS us`
      assert.strictEqual(at!.us, 700)
      const claimed = yield* claim("instant", ["instant"], 1, "worker-instant", at!.ms)
      assert.strictEqual(claimed.length, 1, "due within the claim's millisecond")
      // Finished, so that no later test's rescuer finds it running without a lease.
      yield* finalize([{ id: claimed[0]!.id, attempt: 1, outcome: { _tag: "Completed" } }])
    }),
  )

  it.effect("JobsStaleCompletionIgnored: an outcome from a worker that lost the job changes nothing", () =>
    Effect.gen(function* () {
      const jobs = yield* Jobs
      const sql = yield* SqlClient.SqlClient
      yield* jobs.insert([{ kind: "contested", queue: "stale", args: {}, maxAttempts: 5 }])
      yield* JobLease.renew("worker-a", 60_000)
      yield* JobLease.renew("worker-b", 60_000)
      const now = () => new Date(Date.now() + 1000)
      const [a] = yield* claim("stale", ["contested"], 1, "worker-a", now())
      assert.strictEqual(a!.attempt, 1)
      // Worker A goes silent; its lease runs out and the job is rescued, then B claims it.
      yield* sql`UPDATE job_workers SET expires_at = clock_timestamp() - interval '1 second' WHERE id = 'worker-a'`
      const rescued = yield* JobLease.rescue()
      assert.deepStrictEqual(
        rescued.map((r) => r.state),
        ["retryable"],
      )
      const [b] = yield* claim("stale", ["contested"], 1, "worker-b", now())
      assert.strictEqual(b!.attempt, 2)

      // A's late outcomes while B runs: ignored (a completion would delete the row).
      const late = (outcome: Finished["outcome"]) => finalize([{ id: a!.id, attempt: a!.attempt, outcome }])
      const error = { attempt: 1, at: new Date().toISOString(), kind: "failure" as const, message: "late" }
      assert.strictEqual((yield* late({ _tag: "Completed" })).size, 0)
      assert.strictEqual((yield* late({ _tag: "Retry", at: new Date(), error })).size, 0)
      const r = yield* row("contested")
      assert.deepStrictEqual([r.state, r.attempt], ["running", 2])
      assert.deepStrictEqual(
        r.errors.map((e) => e.kind),
        ["rescued"],
      )
      // B finishes (the row is deleted); A's late outcomes cannot bring it back.
      assert.strictEqual((yield* finalize([{ id: b!.id, attempt: 2, outcome: { _tag: "Completed" } }])).size, 1)
      assert.strictEqual((yield* late({ _tag: "Retry", at: new Date(), error })).size, 0)
      assert.strictEqual((yield* late({ _tag: "Discarded", error })).size, 0)
      assert.strictEqual((yield* late({ _tag: "Completed" })).size, 0)
      assert.deepStrictEqual(yield* rows("contested"), [])
    }),
  )

  it.effect(
    "JobsCompletedDeletedUnlessUniqueKey: a completed job's row is deleted at once, one with a unique key stays completed",
    () =>
      Effect.gen(function* () {
        const jobs = yield* Jobs
        const sql = yield* SqlClient.SqlClient
        yield* jobs.insert([
          { kind: "finishing", queue: "finish", args: { n: 0 } },
          { kind: "finishing", queue: "finish", args: { n: 1 }, uniqueKey: "finishing:1" },
          { kind: "finishing", queue: "finish", args: { n: 2 } },
        ])
        yield* JobLease.renew("worker-f", 60_000)
        const claimed = yield* claim("finish", ["finishing"], 3, "worker-f", new Date(Date.now() + 1000))
        assert.strictEqual(claimed.length, 3)
        const done = (attempt: (job: (typeof claimed)[number]) => number) =>
          finalize(claimed.map((job) => ({ id: job.id, attempt: attempt(job), outcome: { _tag: "Completed" } })))
        // A completion for another attempt touches neither kind of row.
        assert.strictEqual((yield* done((job) => job.attempt + 1)).size, 0)
        const running = yield* sql<{ state: string }>`SELECT state::text FROM jobs WHERE kind = 'finishing'`
        assert.deepStrictEqual(
          running.map((r) => r.state),
          ["running", "running", "running"],
        )

        assert.deepStrictEqual(
          [...(yield* done((job) => job.attempt))].sort(),
          claimed.map((job) => job.id).sort(),
          "all three applied",
        )
        const left = yield* sql<{ n: number; state: string; finalized: boolean }>`
          SELECT (args->>'n')::int AS n, state::text, finalized_at IS NOT NULL AS finalized
          FROM jobs WHERE kind = 'finishing'`
        assert.deepStrictEqual(
          left.map((r) => [r.n, r.state, r.finalized]),
          [[1, "completed", true]],
          "only the row with a unique key is left, completed",
        )
        // That row still makes a duplicate insert a no-op; a repeated completion changes nothing.
        const again = yield* jobs.insert([
          { kind: "finishing", queue: "finish", args: { n: 1 }, uniqueKey: "finishing:1" },
        ])
        assert.deepStrictEqual(again, { inserted: 0, suppressed: 1 })
        assert.strictEqual((yield* done((job) => job.attempt)).size, 0)
      }),
  )

  it.effect(
    "JobsClaimCommitsUnflushed: a claim's own transaction does not wait for the WAL flush, and the session keeps its setting",
    () =>
      Effect.gen(function* () {
        const jobs = yield* Jobs
        const db = yield* TestDatabase.TestDatabase
        yield* jobs.insert([{ kind: "unflushed", queue: "unflushed", args: {} }])
        // One connection, so that the check after the claim runs in the claim's session, whose own
        // setting is "on" (the test server's default is "off").
        const [during, after] = yield* Effect.gen(function* () {
          const sql = yield* SqlClient.SqlClient
          const setting = Effect.map(
            sql<{ v: string }>`SELECT current_setting('synchronous_commit') AS v`,
            (r) => r[0]!.v,
          )
          // Inside a transaction (rolled back) the claim's setting is visible to the next statement.
          const during = yield* sql
            .withTransaction(
              Effect.gen(function* () {
                const claimed = yield* claim("unflushed", ["unflushed"], 1, "worker-u", new Date(Date.now() + 1000))
                assert.strictEqual(claimed.length, 1)
                return yield* Effect.fail(yield* setting)
              }),
            )
            .pipe(Effect.flip)
          const claimed = yield* claim("unflushed", ["unflushed"], 1, "worker-u", new Date(Date.now() + 1000))
          assert.strictEqual(claimed.length, 1)
          return [during, yield* setting] as const
        }).pipe(
          Effect.provide(
            PgClient.layer({
              url: Redacted.make(db.url),
              maxConnections: 1,
              startupParameters: { synchronous_commit: "on" },
            }),
          ),
        )
        assert.strictEqual(during, "off", "the claim's transaction commits without waiting for the flush")
        assert.strictEqual(after, "on", "the session's later statements (a job's own writes) still wait")
      }),
  )
})
