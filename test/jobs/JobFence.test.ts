import { randomUUID } from "node:crypto"
import { PgClient } from "@effect/sql-pg"
import { assert, layer } from "@effect/vitest"
import {
  Clock,
  Context,
  Duration,
  Effect,
  Exit,
  Layer,
  Logger,
  Metric,
  Option,
  Queue,
  Redacted,
  Schema,
  Scope,
} from "effect"
import { SqlClient } from "effect/sql"
import { TestClock } from "effect/testing"
import * as JobBackendRescue from "../../src/jobs/JobBackendRescue.ts"
import { claim } from "../../src/jobs/JobClaim.ts"
import type * as JobCompleter from "../../src/jobs/JobCompleter.ts"
import { backendLostMessage, fencedMessage } from "../../src/jobs/JobExecutor.ts"
import * as JobKind from "../../src/jobs/JobKind.ts"
import * as JobLease from "../../src/jobs/JobLease.ts"
import * as JobLiveness from "../../src/jobs/JobLiveness.ts"
import * as JobMetrics from "../../src/jobs/JobMetrics.ts"
import { Jobs } from "../../src/jobs/Jobs.ts"
import * as JobWorker from "../../src/jobs/JobWorker.ts"
import { NotificationStream } from "../../src/platform/NotificationStream.ts"
import { eventually } from "../support/Eventually.ts"
import * as RowLock from "../support/RowLock.ts"
import * as TestDatabase from "../support/TestDatabase.ts"

const Live = Layer.mergeAll(Jobs.layer, NotificationStream.layer()).pipe(Layer.provideMerge(TestDatabase.layer()))

// Whole seconds: the fence's margin (a sixth) is 2 s and the watchdog's tick (half of that) 1 s.
const leaseMillis = 12_000
const marginMillis = leaseMillis / 6
const lease = Duration.millis(leaseMillis)

/** Guards a wait on a signal against a hang, by real time (the test's clock is the TestClock). */
const within = <A, E, R>(what: string, wait: Effect.Effect<A, E, R>) =>
  TestClock.withLive(
    wait.pipe(
      Effect.timeoutOrElse({ duration: "20 seconds", orElse: () => Effect.sync(() => assert.fail(`${what}: never`)) }),
    ),
  )

interface Run {
  readonly by: string
  readonly attempt: number
  /** The worker's clock. */
  readonly at: number
}

/**
 * The job kind of these tests, one per worker (`by` names it): an attempt says it started, and the
 * first one then waits forever, saying when it is interrupted; later ones complete. It also keeps
 * the most attempts that ever ran at once, across all workers.
 */
const setUp = Effect.gen(function* () {
  const started = yield* Queue.unbounded<Run>()
  const interrupted = yield* Queue.unbounded<Run>()
  const lines = yield* Queue.unbounded<{ readonly level: string; readonly text: string }>()
  const logged: Array<{ readonly level: string; readonly text: string }> = []
  let running = 0
  let mostAtOnce = 0
  const kind = (by: string) =>
    JobKind.make({
      kind: "fence.blocks",
      args: Schema.Struct({}),
      run: (_, job) =>
        Effect.gen(function* () {
          mostAtOnce = Math.max(mostAtOnce, ++running)
          yield* Queue.offer(started, { by, attempt: job.attempt, at: yield* Clock.currentTimeMillis })
          if (job.attempt === 1) yield* Effect.never
        }).pipe(
          Effect.onInterrupt(() =>
            Effect.flatMap(Clock.currentTimeMillis, (at) => Queue.offer(interrupted, { by, attempt: job.attempt, at })),
          ),
          Effect.ensuring(Effect.sync(() => running--)),
        ),
    })
  const logger = Logger.make(({ logLevel, message }) => {
    const text = (Array.isArray(message) ? message : [message]).filter((m) => typeof m === "string").join(" ")
    logged.push({ level: logLevel, text })
    Queue.offerUnsafe(lines, { level: logLevel, text })
  })
  const waitForLine = (level: string, includes: string) =>
    within(
      `a ${level} line with "${includes}"`,
      Effect.gen(function* () {
        for (;;) {
          const line = yield* Queue.take(lines)
          if (line.level === level && line.text.includes(includes)) return line
        }
      }),
    )
  return {
    jobs: yield* Jobs,
    sql: yield* SqlClient.SqlClient,
    kind,
    started,
    interrupted,
    logged,
    waitForLine,
    logs: Logger.layer([logger], { mergeWithExisting: true }),
    mostAtOnce: () => mostAtOnce,
  }
})

/** Starts a worker in its own scope; its recorded batches arrive on the queue. */
const startWorker = <ROut, E>(
  kind: JobWorker.JobWorkerOptions<never>["kinds"][number],
  queue: string,
  provide: Layer.Layer<ROut, E>,
) =>
  Effect.gen(function* () {
    const finalized = yield* Queue.unbounded<ReadonlyArray<JobCompleter.Reported>>()
    const scope = yield* Scope.make()
    const stop = Scope.close(scope, Exit.void)
    // Stopped by the test, or at its end when it fails first.
    yield* Effect.addFinalizer(() => stop)
    const context = yield* Layer.buildWithScope(
      JobWorker.layer({
        kinds: [kind],
        queues: { [queue]: { concurrency: 2 } },
        lease,
        // Shutdown waits by the TestClock, which nothing moves then: it interrupts at once.
        shutdownTimeout: "0 millis",
        onFinalized: (batch) => Queue.offer(finalized, batch).pipe(Effect.asVoid),
      }).pipe(Layer.provide(provide)),
      scope,
    )
    const id = Context.get(context, JobWorker.JobWorker).id
    const outcome = within(`an outcome recorded by ${id}`, Queue.take(finalized)).pipe(
      Effect.map((batch) => {
        assert.strictEqual(batch.length, 1)
        return batch[0]!
      }),
    )
    return { id, stop, outcome }
  })

interface Row {
  readonly state: string
  readonly attempt: number
  readonly maxAttempts: number
  readonly by: string | null
  readonly errors: ReadonlyArray<{ readonly attempt: number; readonly kind: string; readonly message: string }>
}

const rowOf = (key: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql<Row>`
      SELECT state::text, attempt, max_attempts AS "maxAttempts", attempted_by AS by, errors
      FROM jobs WHERE unique_key = ${key}`,
  ).pipe(Effect.map((rows) => rows[0]!))

/** True while the database still counts `worker`'s lease as live, by its own clock. */
const leaseLive = (worker: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) =>
      sql<{ live: boolean }>`SELECT expires_at > clock_timestamp() AS live FROM job_workers WHERE id = ${worker}`,
  ).pipe(Effect.map((rows) => rows[0]?.live === true))

const fencedCount = Effect.map(Metric.value(JobMetrics.fenced), (s) => s.count)

/**
 * A login role of its own for a worker, so that the test can take the database away from that
 * worker alone: `shutOut` refuses it new connections and cuts its open ones, `letIn` undoes that.
 * The role is dropped with the scope.
 */
const ownRole = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const db = yield* TestDatabase.TestDatabase
  const name = `fence_${randomUUID().slice(0, 8)}`
  const password = randomUUID()
  yield* Effect.acquireRelease(
    Effect.gen(function* () {
      yield* sql.unsafe(`CREATE ROLE "${name}" LOGIN PASSWORD '${password}'`)
      yield* sql.unsafe(`GRANT ALL ON ALL TABLES IN SCHEMA public TO "${name}"`)
      yield* sql.unsafe(`GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO "${name}"`)
    }),
    () =>
      Effect.gen(function* () {
        yield* sql`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = ${name}`
        yield* sql.unsafe(`DROP OWNED BY "${name}"`)
        yield* sql.unsafe(`DROP ROLE "${name}"`)
      }).pipe(Effect.orDie),
  )
  const url = new URL(db.url)
  url.username = name
  url.password = password
  const letIn = sql.unsafe(`ALTER ROLE "${name}" LOGIN`)
  return {
    pool: PgClient.layer({ url: Redacted.make(url.toString()) }),
    /**
     * Until `letIn`, or the test's end (before its workers stop, should it fail first). The LISTEN
     * connection is spared: its process lives, and a backend gone would fence the worker at once
     * (`JobLiveness`), where this is about the lease.
     */
    shutOut: Effect.gen(function* () {
      yield* sql.unsafe(`ALTER ROLE "${name}" NOLOGIN`)
      yield* Effect.addFinalizer(() => Effect.orDie(letIn))
      // Waits (up to 5 s) for each backend to be gone, so that nothing it was sent runs after, and
      // again until a pass finds none: a connection that logged in just before NOLOGIN shows in
      // pg_stat_activity only once its start-up ends (the CI run found one writing after this).
      yield* TestClock.withLive(
        eventually(
          sql<{ n: number }>`
            SELECT count(*)::int AS n FROM (
              SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity
              WHERE usename = ${name} AND application_name <> 'bothy-listen') AS t`,
          (rows) => rows[0]!.n === 0,
          { what: "no connection of the shut-out role left", within: "20 seconds", every: "100 millis" },
        ),
      )
    }),
    letIn,
  }
})

/**
 * Holds the row lock on `worker`'s lease row in a transaction of its own until the returned effect
 * ends it, or the test does (before its workers stop, should it fail first).
 */
const lockLease = (worker: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const lock = yield* RowLock.hold(sql`SELECT id FROM job_workers WHERE id = ${worker} FOR UPDATE`)
    yield* Effect.addFinalizer(() => Effect.orDie(lock.release))
    return lock.release
  })

/** Waits until a renewal of the lease is waiting for a row lock, as PostgreSQL reports it. */
const renewalWaitsOnLock = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  TestClock.withLive(
    eventually(
      sql<{ n: number }>`
        SELECT count(*)::int AS n FROM pg_stat_activity
        WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%INSERT INTO job_workers%'`,
      (rows) => rows[0]!.n === 1,
      { what: "the renewal waits for the lease row's lock", within: "20 seconds", every: "20 millis" },
    ),
  ),
)

layer(Live, { excludeTestServices: true })("JobFence", (it) => {
  it.effect(
    "JobsStopBeforeTheirLeaseLapses: a worker cut off from the database stops its running job before its lease lapses, and another worker's rescuer runs it once, never beside it",
    () =>
      Effect.gen(function* () {
        // Rows inserted without a time would be due at the database's now(), after the clock's.
        yield* TestClock.setTime(Date.now())
        const { jobs, sql, kind, started, interrupted, logged, waitForLine, logs, mostAtOnce } = yield* setUp
        const role = yield* ownRole
        const t0 = yield* Clock.currentTimeMillis
        yield* jobs.insert([
          { kind: "fence.blocks", queue: "away", args: {}, uniqueKey: "away", scheduledAt: new Date(t0) },
        ])
        const fencedBefore = yield* fencedCount
        const a = yield* startWorker(
          kind("a"),
          "away",
          Layer.mergeAll(logs, NotificationStream.layer().pipe(Layer.provideMerge(role.pool))),
        )
        const first = yield* within("the first attempt", Queue.take(started))
        assert.deepStrictEqual([first.by, first.attempt], ["a", 1])
        // The last renewal that succeeded was sent at the start: the lease is surely live until
        // then plus a lease, by this worker's clock.
        const liveUntil = first.at + leaseMillis

        yield* role.shutOut
        yield* TestClock.adjust(Duration.millis(leaseMillis / 2))
        assert.strictEqual(yield* Queue.size(interrupted), 0, "half a lease without a renewal: it runs on")
        yield* TestClock.adjust(Duration.millis(leaseMillis / 2 - 1))
        const stopped = yield* within("the interruption", Queue.take(interrupted))
        assert.deepStrictEqual([stopped.by, stopped.attempt], ["a", 1])
        assert.isAtLeast(stopped.at, liveUntil - marginMillis, "not before the margin")
        assert.isBelow(stopped.at, liveUntil, "before the lease could lapse, by the worker's clock")
        assert.isTrue(yield* leaseLive(a.id), "and before it lapsed as the database sees it")
        const row = yield* rowOf("away")
        assert.deepStrictEqual([row.state, row.attempt, row.by], ["running", 1, a.id], "not completed by worker a")
        assert.strictEqual((yield* fencedCount) - fencedBefore, 1)
        const line = logged.find((l) => l.text.includes(`worker ${a.id} has not renewed its lease for`))
        assert.strictEqual(line?.level, "Error", "one error line says why")
        assert.include(line!.text, "it stops its 1 running jobs")

        // A lease's worth of the database's time passes (not waited for here): it has lapsed.
        yield* sql`UPDATE job_workers SET expires_at = clock_timestamp() - interval '1 millisecond' WHERE id = ${a.id}`
        const b = yield* startWorker(kind("b"), "away", logs)
        yield* waitForLine("Warn", "rescued 1 jobs of workers whose lease expired")
        yield* TestClock.adjust("1 second") // b's poll; a, still cut off and fenced, claims nothing
        const second = yield* within("the rescued job's run", Queue.take(started))
        assert.deepStrictEqual([second.by, second.attempt], ["b", 2])
        const done = yield* b.outcome
        assert.deepStrictEqual([done.outcome._tag, done.recorded], ["Completed", "applied"])
        const after = yield* rowOf("away")
        assert.deepStrictEqual([after.state, after.attempt], ["completed", 2])
        assert.deepStrictEqual(
          after.errors.map((e) => [e.attempt, e.kind]),
          [[1, "rescued"]],
        )
        assert.strictEqual(mostAtOnce(), 1, "never two attempts at once")

        // Back in touch: a renews its lease and claims again; its outcome of attempt 1 is stale.
        // Its retries wait on the TestClock, and when each failed one set its next is real I/O: keep
        // the clock moving (a second every 50 ms) until both signals came.
        yield* role.letIn
        const mover = Effect.forever(
          TestClock.adjust("1 second").pipe(Effect.andThen(TestClock.withLive(Effect.sleep("50 millis")))),
        )
        const [, late] = yield* Effect.raceFirst(
          Effect.all([waitForLine("Warn", `worker ${a.id} renewed its lease again`), a.outcome]),
          mover,
        )
        assert.deepStrictEqual([late.attempt, late.outcome._tag, late.recorded], [1, "Release", "stale"])
        assert.strictEqual(yield* Queue.size(started), 0, "the job ran twice in all")
        yield* b.stop
        yield* a.stop
      }).pipe(Effect.scoped, Effect.provide(TestClock.layer())),
    { timeout: 60_000 },
  )

  it.effect(
    "JobsStopBeforeTheirLeaseLapses: a worker whose renewal waits on a lock puts its running job back (its attempt not spent), claims nothing while fenced, and claims again once the renewal succeeds",
    () =>
      Effect.gen(function* () {
        yield* TestClock.setTime(Date.now())
        const { jobs, kind, started, interrupted, logged, waitForLine, logs } = yield* setUp
        const t0 = yield* Clock.currentTimeMillis
        yield* jobs.insert([
          {
            kind: "fence.blocks",
            queue: "locked",
            args: {},
            uniqueKey: "locked",
            maxAttempts: 5,
            scheduledAt: new Date(t0),
          },
        ])
        const w = yield* startWorker(kind("w"), "locked", logs)
        const first = yield* within("the first attempt", Queue.take(started))
        const liveUntil = first.at + leaseMillis

        const unlock = yield* lockLease(w.id)
        yield* TestClock.adjust(Duration.millis(leaseMillis / 3))
        yield* renewalWaitsOnLock
        yield* TestClock.adjust(Duration.millis((leaseMillis * 2) / 3 - 1))
        const stopped = yield* within("the interruption", Queue.take(interrupted))
        assert.isBelow(stopped.at, liveUntil)
        const released = yield* w.outcome
        assert.deepStrictEqual([released.outcome._tag, released.recorded], ["Release", "applied"])
        const back = yield* rowOf("locked")
        assert.deepStrictEqual(
          [back.state, back.attempt, back.maxAttempts - back.attempt],
          ["available", 1, 5],
          "back, as many attempts left as before",
        )
        assert.deepStrictEqual(
          back.errors.map((e) => [e.kind, e.message]),
          [["interrupted", fencedMessage]],
        )
        assert.isDefined(logged.find((l) => l.level === "Error" && l.text.includes(`worker ${w.id} has not renewed`)))

        // Fenced: the poll (run within the adjustment) does not claim the job again.
        yield* TestClock.adjust("1 second")
        assert.strictEqual((yield* rowOf("locked")).state, "available")
        assert.strictEqual(yield* Queue.size(started), 0)

        // The renewal gets its lock and succeeds; sent 4 s in, it leaves the lease live well past
        // the margin, so the worker claims at once (no poll needed: the clock stands still).
        yield* unlock
        yield* waitForLine("Warn", `worker ${w.id} renewed its lease again`)
        const again = yield* within("the job's next run", Queue.take(started))
        assert.deepStrictEqual([again.by, again.attempt], ["w", 2])
        const done = yield* w.outcome
        assert.deepStrictEqual([done.outcome._tag, done.recorded], ["Completed", "applied"])
        yield* w.stop
      }).pipe(Effect.scoped, Effect.provide(TestClock.layer())),
    { timeout: 60_000 },
  )

  it.effect(
    "JobsStopWhenTheirBackendIsGone: a worker whose LISTEN backend is terminated stops its running job at once (no clock moves), puts it back unspent, and claims again once it recorded its new backend",
    () =>
      Effect.gen(function* () {
        yield* TestClock.setTime(Date.now())
        const { jobs, sql, kind, started, interrupted, logged, waitForLine, logs } = yield* setUp
        const t0 = yield* Clock.currentTimeMillis
        yield* jobs.insert([
          {
            kind: "fence.blocks",
            queue: "gone",
            args: {},
            uniqueKey: "gone",
            maxAttempts: 5,
            scheduledAt: new Date(t0),
          },
        ])
        const fencedBefore = yield* fencedCount
        // A LISTEN connection of its own, so that terminating it touches no other worker.
        const pool = Layer.succeed(PgClient.PgClient, yield* PgClient.PgClient)
        const w = yield* startWorker(
          kind("w"),
          "gone",
          NotificationStream.layer().pipe(Layer.provideMerge(logs), Layer.provide(pool)),
        )
        const first = yield* within("the first attempt", Queue.take(started))
        assert.deepStrictEqual([first.by, first.attempt], ["w", 1])
        const recorded = (worker: string) =>
          sql<{ pid: number | null }>`SELECT backend_pid AS pid FROM job_workers WHERE id = ${worker}`.pipe(
            Effect.map((rows) => rows[0]?.pid ?? null),
          )
        const pid = yield* TestClock.withLive(
          eventually(recorded(w.id), (p) => p !== null, {
            what: "the worker recorded its backend",
            within: "20 seconds",
            every: "20 millis",
          }),
        )

        yield* sql`SELECT pg_terminate_backend(${pid}::int)`
        const stopped = yield* within("the interruption", Queue.take(interrupted))
        assert.deepStrictEqual([stopped.by, stopped.attempt, stopped.at], ["w", 1, t0], "at once: no clock moved")
        const released = yield* w.outcome
        assert.deepStrictEqual([released.outcome._tag, released.recorded], ["Release", "applied"])
        const line = logged.find((l) => l.text.includes(`worker ${w.id} lost its LISTEN connection`))
        assert.strictEqual(line?.level, "Error", "one error line says why")
        assert.strictEqual((yield* fencedCount) - fencedBefore, 1)

        yield* waitForLine("Warn", `worker ${w.id} recorded its new backend`)
        const again = yield* within("the job's next run", Queue.take(started))
        assert.deepStrictEqual([again.by, again.attempt], ["w", 2])
        const done = yield* w.outcome
        assert.deepStrictEqual([done.outcome._tag, done.recorded], ["Completed", "applied"])
        const after = yield* rowOf("gone")
        assert.deepStrictEqual(
          [after.state, after.attempt, after.maxAttempts],
          ["completed", 2, 6],
          "attempt not spent",
        )
        assert.deepStrictEqual(
          after.errors.map((e) => [e.kind, e.message]),
          [["interrupted", backendLostMessage]],
        )
        assert.notStrictEqual(yield* recorded(w.id), pid, "a new backend recorded")
        yield* w.stop
      }).pipe(Effect.scoped, Effect.provide(TestClock.layer())),
    { timeout: 60_000 },
  )

  it.effect(
    "JobsRescuedWhenBackendGone: another worker puts back the running job of a worker whose recorded backend is gone (same pid, another backend_start: a reused pid) once it was seen gone for the grace, by the TestClock, and runs it; a worker whose backend lives keeps its job",
    () =>
      Effect.gen(function* () {
        yield* TestClock.setTime(Date.now())
        const { jobs, sql, kind, started, waitForLine, logs } = yield* setUp
        const t0 = yield* Clock.currentTimeMillis
        yield* jobs.insert([
          { kind: "fence.blocks", queue: "ghost", args: {}, uniqueKey: "ghost", scheduledAt: new Date(t0) },
          { kind: "fence.blocks", queue: "alive", args: {}, uniqueKey: "alive", scheduledAt: new Date(t0) },
        ])
        // Two workers that are only rows: each claimed one job. "alive" records the shared LISTEN
        // connection's backend; "ghost" the same pid with another start, as a reused pid looks.
        const listenPid = Option.getOrThrow(yield* (yield* NotificationStream).backendPid)
        const [live] = yield* sql<{ started: string }>`
          SELECT to_char(backend_start AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS started
          FROM pg_stat_activity WHERE pid = ${listenPid}`
        for (const [worker, started] of [
          ["ghost", "2001-01-01T00:00:00.000000Z"],
          ["alive", live!.started],
        ] as const) {
          yield* JobLease.renew(worker, 600_000)
          assert.strictEqual((yield* claim(worker, ["fence.blocks"], 1, worker, new Date(t0))).length, 1)
          yield* JobLiveness.record(worker, Option.some({ pid: listenPid, started }))
        }

        const b = yield* startWorker(kind("b"), "ghost", logs)
        const grace = Duration.toMillis(JobBackendRescue.grace)
        // Its checks run (real I/O) while the clock stands still, and again as it moves: short of
        // the grace, nothing is put back, however often it looked.
        yield* TestClock.withLive(Effect.sleep("300 millis"))
        for (let moved = 0; moved + 100 < grace; moved += 100) {
          yield* TestClock.adjust("100 millis")
          yield* TestClock.withLive(Effect.sleep("50 millis"))
        }
        assert.strictEqual((yield* rowOf("ghost")).state, "running", "not before the grace")
        yield* TestClock.adjust("100 millis")
        yield* waitForLine("Warn", "rescued 1 jobs of workers whose backend is gone (ghost)")
        const run = yield* within("the rescued job's run", Queue.take(started))
        assert.deepStrictEqual([run.by, run.attempt], ["b", 2])
        const done = yield* b.outcome
        assert.deepStrictEqual([done.outcome._tag, done.recorded], ["Completed", "applied"])
        const ghost = yield* rowOf("ghost")
        assert.deepStrictEqual(
          ghost.errors.map((e) => e.kind),
          ["rescued"],
        )
        assert.include(ghost.errors[0]!.message, "the backend of worker ghost is gone")

        yield* TestClock.adjust("5 seconds")
        yield* TestClock.withLive(Effect.sleep("300 millis"))
        const alive = yield* rowOf("alive")
        assert.deepStrictEqual([alive.state, alive.by], ["running", "alive"], "a live backend keeps its jobs")
        yield* b.stop
      }).pipe(Effect.scoped, Effect.provide(TestClock.layer())),
    { timeout: 60_000 },
  )
})
