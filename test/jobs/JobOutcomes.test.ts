import { PgClient } from "@effect/sql-pg"
import { assert, layer } from "@effect/vitest"
import {
  Clock,
  Context,
  Deferred,
  Duration,
  Effect,
  Exit,
  Layer,
  Logger,
  Metric,
  Queue,
  Redacted,
  Schema,
  Scope,
} from "effect"
import { SqlClient } from "effect/sql"
import type * as JobCompleter from "../../src/jobs/JobCompleter.ts"
import { maxErrorMessageLength } from "../../src/jobs/JobFinalize.ts"
import * as JobKind from "../../src/jobs/JobKind.ts"
import * as JobLease from "../../src/jobs/JobLease.ts"
import * as JobMetrics from "../../src/jobs/JobMetrics.ts"
import { Jobs } from "../../src/jobs/Jobs.ts"
import * as JobWorker from "../../src/jobs/JobWorker.ts"
import { NotificationStream } from "../../src/platform/NotificationStream.ts"
import { isStorable } from "../../src/platform/StorableText.ts"
import * as RowLock from "../support/RowLock.ts"
import * as TestDatabase from "../support/TestDatabase.ts"

const Live = Layer.mergeAll(Jobs.layer, NotificationStream.layer()).pipe(Layer.provideMerge(TestDatabase.layer()))

interface Row {
  readonly id: bigint
  readonly state: string
  readonly attempt: number
  readonly errors: ReadonlyArray<{ readonly attempt: number; readonly kind: string; readonly message: string }>
}

const rowOf = (id: bigint) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql<Row>`SELECT id, state::text, attempt, errors FROM jobs WHERE id = ${id}`,
  ).pipe(Effect.map((rows) => rows[0]))

const idsOf = (kind: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql<{ id: bigint; key: string }>`SELECT id, unique_key AS key FROM jobs WHERE kind = ${kind} ORDER BY id`,
  )

const counted = (metric: Metric.Metric<number, Metric.CounterState<number>>) =>
  Effect.map(Metric.value(metric), (s) => s.count)

interface Logged {
  readonly level: string
  readonly text: string
}

/** Every line the worker logs, on a queue, so that a test can wait for the one it expects. */
const logCapture = Effect.gen(function* () {
  const lines = yield* Queue.unbounded<Logged>()
  const all: Array<Logged> = []
  const logger = Logger.make(({ logLevel, message }) => {
    const text = (Array.isArray(message) ? message : [message]).filter((m) => typeof m === "string").join(" ")
    all.push({ level: logLevel, text })
    Queue.offerUnsafe(lines, { level: logLevel, text })
  })
  const waitFor = (level: string, includes: string) =>
    Effect.gen(function* () {
      for (;;) {
        const line = yield* Queue.take(lines)
        if (line.level === level && line.text.includes(includes)) return line
      }
    }).pipe(
      Effect.timeoutOrElse({
        duration: "20 seconds",
        orElse: () => Effect.sync(() => assert.fail(`no ${level} line with "${includes}" was logged`)),
      }),
    )
  return { all, waitFor, layer: Logger.layer([logger], { mergeWithExisting: true }) }
})

/** Starts a worker in its own scope (closed by the caller); every recorded batch arrives on the queue. */
const startWorker = <ROut, E>(
  kinds: JobWorker.JobWorkerOptions<never>["kinds"],
  queue: string,
  options: Partial<JobWorker.JobWorkerOptions<never>> & {
    /** What the worker gets besides the test's services: a log capture, a pool of its own. */
    readonly provide: Layer.Layer<ROut, E>
  },
) =>
  Effect.gen(function* () {
    const finalized = yield* Queue.unbounded<ReadonlyArray<JobCompleter.Reported>>()
    const scope = yield* Scope.make()
    const context = yield* Layer.buildWithScope(
      JobWorker.layer({
        kinds,
        queues: { [queue]: { concurrency: 10 } },
        onFinalized: (batch) => Queue.offer(finalized, batch).pipe(Effect.asVoid),
        ...options,
      }).pipe(Layer.provide(options.provide)),
      scope,
    )
    return { finalized, scope, worker: Context.get(context, JobWorker.JobWorker) }
  })

/** Batches until `n` outcomes have been reported, failing clearly if the completer never reports them. */
const outcomes = (finalized: Queue.Dequeue<ReadonlyArray<JobCompleter.Reported>>, n: number) =>
  Effect.gen(function* () {
    const batches: Array<ReadonlyArray<JobCompleter.Reported>> = []
    while (batches.flat().length < n) batches.push(yield* Queue.take(finalized))
    return batches
  }).pipe(
    Effect.timeoutOrElse({
      duration: "20 seconds",
      orElse: () => Effect.sync(() => assert.fail(`${n} outcomes were not recorded: the completer is wedged`)),
    }),
  )

/**
 * What each test starts from: a log capture, and job kinds whose runs say they started and then
 * wait for one gate, so that every job of a test can be claimed first and all of them finish at once.
 */
const setUp = Effect.gen(function* () {
  const started = yield* Queue.unbounded<bigint>()
  const gate = yield* Deferred.make<void>()
  const kind = <A>(
    name: string,
    args: Schema.Decoder<A>,
    then: (args: A, job: JobKind.JobInfo) => Effect.Effect<void, unknown>,
  ) =>
    JobKind.make({
      kind: name,
      args,
      retryDelay: () => Duration.hours(1),
      run: (a, job) =>
        Queue.offer(started, job.id).pipe(Effect.andThen(Deferred.await(gate)), Effect.andThen(then(a, job))),
    })
  return {
    jobs: yield* Jobs,
    sql: yield* SqlClient.SqlClient,
    logs: yield* logCapture,
    kind,
    allStarted: (n: number) => Effect.forEach(Array.from({ length: n }), () => Queue.take(started)),
    open: Deferred.succeed(gate, undefined),
  }
})

/** Holds a row lock on job `id` in a transaction of its own until the returned effect releases it. */
const lockRow = (id: bigint) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(RowLock.hold(sql`SELECT id FROM jobs WHERE id = ${id} FOR UPDATE`), (lock) => lock.release),
  )

layer(Live, { excludeTestServices: true })("Job outcomes", (it) => {
  it.effect(
    "JobsUnstorableErrorDoesNotWedgeWorker: NUL, lone-surrogate and huge error texts are recorded storable and capped, with the other outcomes of their batch, and the worker shuts down",
    () =>
      Effect.gen(function* () {
        const { jobs, sql, logs, kind, allStarted, open } = yield* setUp
        const texts: Record<string, string> = {
          nul: "bad\u0000byte",
          surrogate: "half \ud83d pair",
          huge: `${"x".repeat(1_000_000)}\u0000`,
        }
        const odd = kind(
          "odd.failure",
          Schema.Struct({ text: Schema.String, how: Schema.Literals(["fail", "die", "cancel"]) }),
          ({ text, how }) =>
            how === "fail"
              ? Effect.fail(new Error(texts[text]))
              : how === "die"
                ? Effect.die(texts[text])
                : Effect.fail(new JobKind.JobCancel({ reason: `${texts.nul} ${texts.surrogate}` })),
        )
        const plain = kind("plain", Schema.Struct({}), () => Effect.void)
        yield* jobs.insert([
          { kind: "odd.failure", queue: "odd", args: { text: "nul", how: "fail" }, maxAttempts: 1, uniqueKey: "nul" },
          { kind: "odd.failure", queue: "odd", args: { text: "surrogate", how: "fail" }, uniqueKey: "surrogate" },
          { kind: "odd.failure", queue: "odd", args: { text: "huge", how: "die" }, maxAttempts: 1, uniqueKey: "huge" },
          { kind: "odd.failure", queue: "odd", args: { text: "nul", how: "cancel" }, uniqueKey: "cancel" },
          { kind: "plain", queue: "odd", args: {}, uniqueKey: "kept" },
          { kind: "plain", queue: "odd", args: {} },
        ])
        const ids = new Map((yield* idsOf("odd.failure")).map((r) => [r.key, r.id]))
        const [kept] = yield* idsOf("plain")

        const { finalized, scope, worker } = yield* startWorker([odd, plain], "odd", { provide: logs.layer })
        yield* allStarted(6)
        yield* open
        const batches = yield* outcomes(finalized, 6)
        assert.strictEqual(batches.length, 1, "the six outcomes went out as one batch")
        assert.deepStrictEqual(
          batches[0]!.map((f) => [f.outcome._tag, f.recorded]).sort(),
          [
            ["Cancelled", "applied"],
            ["Completed", "applied"],
            ["Completed", "applied"],
            ["Discarded", "applied"],
            ["Discarded", "applied"],
            ["Retry", "applied"],
          ],
          "every outcome of the batch is recorded, the odd ones and the plain ones",
        )

        const message = (key: string) =>
          Effect.map(rowOf(ids.get(key)!), (r) => {
            assert.strictEqual(r!.errors.length, 1)
            return [r!.state, r!.errors[0]!.message] as const
          })
        assert.deepStrictEqual(yield* message("nul"), ["discarded", "bad\uFFFDbyte"])
        assert.deepStrictEqual(yield* message("surrogate"), ["retryable", "half \uFFFD pair"])
        assert.deepStrictEqual(yield* message("cancel"), ["cancelled", "bad\uFFFDbyte half \uFFFD pair"])
        const [state, huge] = yield* message("huge")
        assert.strictEqual(state, "discarded")
        assert.strictEqual(huge.length, maxErrorMessageLength, "capped")
        assert.isTrue(huge.endsWith("…") && huge.includes("xxxx") && isStorable(huge))
        assert.strictEqual((yield* rowOf(kept!.id))!.state, "completed")
        assert.deepStrictEqual(
          logs.all.filter((l) => l.level === "Error" || l.level === "Warn"),
          [],
          "nothing failed on the way",
        )

        yield* Scope.close(scope, Exit.void)
        const lease = yield* sql`SELECT 1 FROM job_workers WHERE id = ${worker.id}`
        assert.deepStrictEqual(lease, [], "shutdown ran to its end: the lease is released")
      }),
  )

  it.effect(
    "JobsUnstorableErrorDoesNotWedgeWorker: outcome rows the database refuses are split off and recorded as placeholders (or, refused even so, lost), logged at error level with their job ids and counted, while the rest of their batch lands",
    () =>
      Effect.gen(function* () {
        const { jobs, sql, logs, kind, allStarted, open } = yield* setUp
        const ranBefore = new Set<bigint>()
        // What each one's snooze cannot be written as: a time past the year 9999 (PostgreSQL refuses
        // the ISO form JavaScript gives it), no time at all (an invalid Date, which cannot even be
        // written out), and an attempt given back past `integer` (a job snoozed two billion times).
        const delays = { far: Duration.days(365 * 10_000), never: Duration.infinity, worn: Duration.seconds(1) }
        const refused = kind(
          "refused.snooze",
          Schema.Struct({ how: Schema.Literals(["far", "never", "worn"]) }),
          ({ how }, job) => {
            if (ranBefore.has(job.id)) return Effect.void
            ranBefore.add(job.id)
            return Effect.fail(new JobKind.JobSnooze({ delay: delays[how] }))
          },
        )
        const plain = kind("plain.mate", Schema.Struct({}), () => Effect.void)
        yield* jobs.insert([
          { kind: "refused.snooze", queue: "refused", args: { how: "far" }, maxAttempts: 1, uniqueKey: "far" },
          { kind: "refused.snooze", queue: "refused", args: { how: "never" }, maxAttempts: 1, uniqueKey: "never" },
          { kind: "refused.snooze", queue: "refused", args: { how: "worn" }, uniqueKey: "worn" },
          { kind: "plain.mate", queue: "refused", args: {}, uniqueKey: "mate" },
          { kind: "plain.mate", queue: "refused", args: {} },
          { kind: "plain.mate", queue: "refused", args: {}, uniqueKey: "unchangeable" },
        ])
        const ids = new Map((yield* idsOf("refused.snooze")).map((r) => [r.key, r.id]))
        const [mate, , unchangeable] = yield* idsOf("plain.mate")
        yield* sql`UPDATE jobs SET attempt = 2147483000, max_attempts = 2147483647 WHERE id = ${ids.get("worn")!}`
        const placeholdersBefore = yield* counted(JobMetrics.outcomePlaceholders)
        const lostBefore = yield* counted(JobMetrics.outcomesLost)

        const { finalized, scope } = yield* startWorker([refused, plain], "refused", { provide: logs.layer })
        yield* allStarted(6)
        // Once claimed, one row refuses every change, as a host's trigger might make it.
        yield* sql.unsafe(`
          CREATE FUNCTION refuse_change() RETURNS trigger LANGUAGE plpgsql AS
          $$ BEGIN RAISE EXCEPTION 'job % may not change', OLD.id; END $$`)
        yield* sql.unsafe(`
          CREATE TRIGGER unchangeable BEFORE UPDATE OR DELETE ON jobs FOR EACH ROW
          WHEN (OLD.unique_key = 'unchangeable') EXECUTE FUNCTION refuse_change()`)
        yield* open
        const [batch] = yield* outcomes(finalized, 6)
        assert.strictEqual(batch!.length, 6, "the six outcomes went out as one batch")
        const refusedIds = new Set(ids.values())
        assert.deepStrictEqual(
          batch!.filter((f) => refusedIds.has(f.id)).map((f) => f.recorded),
          ["placeholder", "placeholder", "placeholder"],
        )
        assert.deepStrictEqual(
          batch!.filter((f) => !refusedIds.has(f.id)).map((f) => [f.id, f.recorded]),
          [
            [mate!.id, "applied"],
            [mate!.id + 1n, "applied"],
            [unchangeable!.id, "lost"],
          ],
          "the rest of the batch landed, but for the row that refuses every change",
        )
        assert.strictEqual((yield* counted(JobMetrics.outcomePlaceholders)) - placeholdersBefore, 3)
        assert.strictEqual((yield* counted(JobMetrics.outcomesLost)) - lostBefore, 1)
        const lost = logs.all.find((l) => l.text.includes(`refused even the placeholder of job ${unchangeable!.id} `))
        assert.strictEqual(lost?.level, "Error", "logged at error level with its job id")
        assert.include(lost?.text, `job ${unchangeable!.id} may not change`)
        for (const [how, id] of ids) {
          const line = logs.all.find((l) => l.level === "Error" && l.text.includes(`job ${id} `))
          assert.isDefined(line, `the refusal of ${how} is logged at error level with its job id`)
          assert.include(line!.text, "recording a placeholder instead")
        }

        // The placeholder of a snooze is what a rescue does: discarded when no attempt is left,
        // else retryable at once (the worn job runs again and completes).
        const [worn] = yield* outcomes(finalized, 1)
        assert.deepStrictEqual(
          worn!.map((f) => [f.id, f.outcome._tag, f.recorded]),
          [[ids.get("worn")!, "Completed", "applied"]],
        )
        const why = {
          far: "time zone displacement out of range",
          never: "RangeError: Invalid time value",
          worn: "integer out of range",
        }
        for (const [how, id] of ids) {
          const r = (yield* rowOf(id))!
          assert.strictEqual(r.state, how === "worn" ? "completed" : "discarded")
          assert.deepStrictEqual(
            r.errors.map((e) => e.kind),
            ["unrecordable"],
          )
          assert.include(r.errors[0]!.message, "the Snooze outcome could not be recorded: ")
          assert.include(r.errors[0]!.message, why[how as keyof typeof why])
        }
        assert.strictEqual((yield* rowOf(mate!.id))!.state, "completed")
        assert.strictEqual((yield* rowOf(unchangeable!.id))!.state, "running", "no statement could change it")
        yield* Scope.close(scope, Exit.void)
      }).pipe(
        Effect.ensuring(
          Effect.flatMap(SqlClient.SqlClient, (sql) =>
            sql
              .unsafe(`DROP FUNCTION IF EXISTS refuse_change CASCADE`)
              .pipe(Effect.andThen(sql`DELETE FROM jobs WHERE unique_key = 'unchangeable'`), Effect.orDie),
          ),
        ),
      ),
  )

  it.effect(
    "JobsUnstorableErrorDoesNotWedgeWorker: while its outcomes cannot be recorded, the worker lets its lease run out so that its running jobs are rescued, and renews it once they are recorded",
    () =>
      Effect.gen(function* () {
        const { jobs, sql, logs, kind, allStarted, open } = yield* setUp
        const blocked = kind("blocked", Schema.Struct({}), () => Effect.void)
        const long = kind("long", Schema.Struct({}), () => Effect.never)
        yield* jobs.insert([
          { kind: "blocked", queue: "stuck", args: {} },
          { kind: "long", queue: "stuck", args: {} },
        ])
        const [b] = yield* idsOf("blocked")
        const [l] = yield* idsOf("long")

        const { finalized, scope, worker } = yield* startWorker([blocked, long], "stuck", {
          provide: logs.layer,
          lease: "2 seconds",
          shutdownTimeout: "100 millis",
        })
        yield* allStarted(2)
        // The completion of `blocked` waits for a row lock, as behind someone's open transaction.
        const unlock = yield* lockRow(b!.id)
        yield* open

        yield* logs.waitFor("Error", `worker ${worker.id} stops renewing its lease and claiming`)
        yield* logs.waitFor("Warn", "rescued 1 jobs of workers whose lease expired")
        const rescued = yield* rowOf(l!.id)
        assert.deepStrictEqual(
          rescued!.errors.map((e) => e.kind),
          ["rescued"],
          "the job still running in the worker was put back",
        )
        assert.strictEqual((yield* rowOf(b!.id))!.state, "running", "the locked one waits for its completion")

        yield* unlock
        const [done] = yield* outcomes(finalized, 1)
        assert.deepStrictEqual(
          done!.map((f) => [f.id, f.recorded]),
          [[b!.id, "applied"]],
        )
        yield* logs.waitFor("Warn", `worker ${worker.id} renewed its lease`)
        const [lease] = yield* sql<{ live: boolean }>`
          SELECT expires_at > clock_timestamp() AS live FROM job_workers WHERE id = ${worker.id}`
        assert.isTrue(lease?.live, "the lease is live again")
        yield* Scope.close(scope, Exit.void)
      }),
  )

  it.effect(
    "JobsUnstorableErrorDoesNotWedgeWorker: shutdown ends within its timeout while the database refuses outcomes; it gives them up with their job ids and releases the lease, so the rescuer takes the jobs",
    () =>
      Effect.gen(function* () {
        const { jobs, sql, logs, kind, allStarted, open } = yield* setUp
        const db = yield* TestDatabase.TestDatabase
        const refusedKind = kind("refused.done", Schema.Struct({}), () => Effect.void)
        yield* jobs.insert([{ kind: "refused.done", queue: "refusing", args: {} }])
        const [j] = yield* idsOf("refused.done")
        const lostBefore = yield* counted(JobMetrics.outcomesLost)
        const leaseMillis = 3000
        const shutdownMillis = 100

        // The worker's own pool cancels any statement after 300 ms: its completion of the job,
        // waiting for the row lock, fails with a statement timeout every time it is tried.
        const pool = PgClient.layer({ url: Redacted.make(db.url), startupParameters: { statement_timeout: "300" } })
        const { scope, worker } = yield* startWorker([refusedKind], "refusing", {
          provide: Layer.mergeAll(logs.layer, NotificationStream.layer().pipe(Layer.provideMerge(pool))),
          lease: Duration.millis(leaseMillis),
          shutdownTimeout: Duration.millis(shutdownMillis),
        })
        yield* allStarted(1)
        const unlock = yield* lockRow(j!.id)
        yield* open
        yield* logs.waitFor("Warn", "recording 1 outcomes failed")

        const begin = yield* Clock.currentTimeMillis
        yield* Scope.close(scope, Exit.void)
        const took = (yield* Clock.currentTimeMillis) - begin
        // It kept trying for its grace (two thirds of a lease), then gave up; the upper bound
        // allows for a busy machine, the point being that it ends.
        assert.isAtLeast(took, (leaseMillis * 2) / 3)
        assert.isBelow(took, shutdownMillis + leaseMillis + 10_000)
        const gaveUp = yield* logs.waitFor("Error", "gave up recording the outcomes of")
        assert.include(gaveUp.text, `job ${j!.id} (attempt 1, Completed)`)
        assert.strictEqual((yield* counted(JobMetrics.outcomesLost)) - lostBefore, 1)

        yield* unlock
        assert.deepStrictEqual(yield* sql`SELECT 1 FROM job_workers WHERE id = ${worker.id}`, [], "lease released")
        const rescued = yield* JobLease.rescue()
        assert.deepStrictEqual(
          rescued.map((r) => [r.id, r.state]),
          [[j!.id, "retryable"]],
          "the rescuer takes the job at once",
        )
      }),
  )
})
