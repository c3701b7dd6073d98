import { fileURLToPath } from "node:url"
import { assert, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { SqlClient } from "effect/sql"
import { type JobInsert, Jobs } from "../../src/jobs/Jobs.ts"
import { eventually } from "../support/Eventually.ts"
import * as NodeProcess from "../support/NodeProcess.ts"
import * as TestDatabase from "../support/TestDatabase.ts"

const entry = fileURLToPath(new URL("../support/jobWorker.ts", import.meta.url))

const Live = Jobs.layer.pipe(Layer.provideMerge(TestDatabase.layer()))

const startWorker = (env: Record<string, string> = {}) =>
  Effect.gen(function* () {
    const db = yield* TestDatabase.TestDatabase
    const worker = yield* NodeProcess.start(entry, [], { DATABASE_URL: db.url, ...env })
    const ready = yield* worker.waitFor(/^READY /)
    return { ...worker, id: ready.slice("READY ".length) }
  })

/**
 * `keep`: each job gets a unique key, so its row stays `completed` for the test to inspect; without
 * one a completed job's row is deleted at once.
 */
const insertJobs = (args: ReadonlyArray<{ readonly n: number } & Record<string, unknown>>, keep = false) =>
  Effect.gen(function* () {
    const jobs = yield* Jobs
    for (let i = 0; i < args.length; i += 1000) {
      yield* jobs.insert(
        args.slice(i, i + 1000).map(
          (a): JobInsert => ({
            kind: "test.effect",
            args: a as JobInsert["args"],
            maxAttempts: 3,
            ...(keep ? { uniqueKey: `test.effect:${a.n}` } : {}),
          }),
        ),
      )
    }
  })

const states = Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => sql<{ state: string; n: number }>`SELECT state::text, count(*)::int AS n FROM jobs GROUP BY 1 ORDER BY 1`,
).pipe(Effect.map((rows) => Object.fromEntries(rows.map((r) => [r.state, r.n]))))

/** Polls until `n` jobs are completed (jobs inserted with `keep`). */
const awaitCompleted = (n: number) =>
  eventually(states, (s) => (s.completed ?? 0) >= n, {
    what: `${n} jobs completed`,
    within: "120 seconds",
    every: "100 millis",
  })

/** Polls until no job is left (completed jobs are deleted, dead ones would stay). */
const awaitNoJobs = eventually(states, (s) => Object.keys(s).length === 0, {
  what: "no job left",
  within: "120 seconds",
  every: "100 millis",
})

const createEffects = (sql: SqlClient.SqlClient) =>
  sql`CREATE TABLE IF NOT EXISTS job_effects (job_id bigint NOT NULL, n int NOT NULL, attempt int NOT NULL, worker int NOT NULL)`

layer(Live, { excludeTestServices: true })("Job worker processes", (it) => {
  it.effect(
    "JobsFourWorkersRunEachOnce: 4 worker processes, 10,000 jobs, each job's effect once per attempt",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        yield* createEffects(sql)
        // One job in ten fails its first attempt and is retried: its effect happens once per attempt.
        yield* insertJobs(Array.from({ length: 10_000 }, (_, n) => ({ n, failFirst: n % 10 === 0 })))
        const workers = yield* Effect.forEach([1, 2, 3, 4], () => startWorker({ CONCURRENCY: "10" }), {
          concurrency: 4,
        })
        // Every job completed: no row is left, as a completed job without a unique key is deleted.
        yield* awaitNoJobs
        for (const w of workers) w.child.kill("SIGTERM")
        for (const w of workers) assert.strictEqual((yield* w.exited).code, 0)

        assert.deepStrictEqual(yield* states, {})
        const effects = yield* sql<{ n: number; attempts: string; ids: number }>`
          SELECT n, string_agg(attempt::text, ',' ORDER BY attempt) AS attempts, count(DISTINCT job_id)::int AS ids
          FROM job_effects GROUP BY n ORDER BY n`
        assert.deepStrictEqual(
          effects.map((e) => e.n),
          Array.from({ length: 10_000 }, (_, n) => n),
          "every job ran",
        )
        const wrong = effects.filter((e) => e.ids !== 1 || e.attempts !== (e.n % 10 === 0 ? "1,2" : "1"))
        assert.deepStrictEqual(wrong.slice(0, 5), [], "every job's effect happened once per attempt")
        const perWorker = yield* sql<{ worker: number }>`SELECT DISTINCT worker FROM job_effects`
        assert.strictEqual(perWorker.length, 4, "all four processes ran jobs")
      }).pipe(Effect.scoped),
    180_000,
  )

  it.effect(
    "JobsRescuedAfterWorkerKilled: SIGKILL a worker holding running jobs; they run again elsewhere after its lease expires, and complete once",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        yield* createEffects(sql)
        yield* sql`TRUNCATE jobs, job_effects`
        yield* insertJobs(
          [0, 1, 2].map((n) => ({ n, hangFirst: true })),
          true,
        )
        const victim = yield* startWorker({ CONCURRENCY: "3", LEASE_MS: "2000" })
        yield* victim.waitFor(/^START /, 3)
        victim.child.kill("SIGKILL")
        assert.strictEqual((yield* victim.exited).signal, "SIGKILL")
        assert.deepStrictEqual(yield* states, { running: 3 })

        const rescuer = yield* startWorker({ CONCURRENCY: "3", LEASE_MS: "2000" })
        yield* awaitCompleted(3).pipe(Effect.timeout("30 seconds"))
        rescuer.child.kill("SIGTERM")
        assert.strictEqual((yield* rescuer.exited).code, 0)
        const rows = yield* sql<{
          attempt: number
          by: string
          errors: ReadonlyArray<{ kind: string }>
          effects: number
        }>`
          SELECT j.attempt, j.attempted_by AS by, j.errors,
                 (SELECT count(*)::int FROM job_effects AS e WHERE e.job_id = j.id) AS effects
          FROM jobs AS j ORDER BY j.id`
        for (const r of rows) {
          assert.strictEqual(r.attempt, 2)
          assert.strictEqual(r.by, rescuer.id, "ran again on the other worker")
          assert.deepStrictEqual(
            r.errors.map((e) => e.kind),
            ["rescued"],
          )
          assert.strictEqual(r.effects, 1, "completed once")
        }
      }).pipe(Effect.scoped),
    60_000,
  )

  it.effect(
    "KilledWorkerWorkResumesFast: SIGKILL a worker running a job while another runs beside it; the other runs the job within 2 s of the kill, long before the lease (default 10 s) lapses",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        yield* createEffects(sql)
        yield* sql`TRUNCATE jobs, job_effects`
        // Attempt 1 never ends (it waits on nothing that comes: no sleep), so it runs until the kill.
        yield* insertJobs([{ n: 0, hangFirst: true }], true)
        const a = yield* startWorker({ CONCURRENCY: "2" })
        const started = yield* a.waitFor(/^START /)
        const jobId = started.slice("START ".length)
        const b = yield* startWorker({ CONCURRENCY: "2" })
        // Both have recorded the backend of their LISTEN connection: the path under test applies.
        yield* eventually(
          sql<{
            n: number
          }>`SELECT count(*)::int AS n FROM job_workers WHERE backend_pid IS NOT NULL AND id IN (${a.id}, ${b.id})`,
          (rows) => rows[0]!.n === 2,
          { what: "both workers recorded their backend", within: "20 seconds", every: "20 millis" },
        )
        assert.deepStrictEqual(yield* states, { running: 1 })

        a.child.kill("SIGKILL")
        const killedAt = performance.now()
        const again = yield* b.waitFor(new RegExp(`^START ${jobId}$`))
        const tookMillis = performance.now() - killedAt
        assert.strictEqual((yield* a.exited).signal, "SIGKILL")
        const [lease] = yield* sql<{ live: boolean }>`
          SELECT expires_at > clock_timestamp() AS live FROM job_workers WHERE id = ${a.id}`
        assert.isBelow(tookMillis, 2000, `the other worker ran the job ${Math.round(tookMillis)} ms after the kill`)
        assert.isTrue(lease?.live, "the killed worker's lease had not lapsed yet: its backend, not its lease, told")
        assert.strictEqual(again, `START ${jobId}`)

        yield* awaitCompleted(1).pipe(Effect.timeout("30 seconds"))
        b.child.kill("SIGTERM")
        assert.strictEqual((yield* b.exited).code, 0)
        const [row] = yield* sql<{
          attempt: number
          by: string
          errors: ReadonlyArray<{ kind: string; message: string }>
        }>`
          SELECT attempt, attempted_by AS by, errors FROM jobs`
        assert.strictEqual(row!.attempt, 2)
        assert.strictEqual(row!.by, b.id, "ran again on the other worker")
        assert.deepStrictEqual(
          row!.errors.map((e) => e.kind),
          ["rescued"],
        )
        assert.include(row!.errors[0]!.message, "backend", "rescued because its backend was gone, not its lease")
        const effects = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM job_effects`
        assert.strictEqual(effects[0]!.n, 1, "completed once")
        console.log(`KilledWorkerWorkResumesFast: the job ran again ${Math.round(tookMillis)} ms after the kill`)
      }).pipe(Effect.scoped),
    60_000,
  )

  it.effect(
    "JobsGracefulShutdown: SIGTERM stops claiming, lets running jobs finish, puts back those that outlast the timeout, and loses none",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        yield* createEffects(sql)
        yield* sql`TRUNCATE jobs, job_effects`
        // Four that finish within the grace period, four that would never finish, four never claimed.
        yield* insertJobs(
          [...[0, 1, 2, 3].map((n) => ({ n, sleepMs: 400 })), ...[4, 5, 6, 7].map((n) => ({ n, hangFirst: true }))],
          true,
        )
        const first = yield* startWorker({ CONCURRENCY: "8", SHUTDOWN_TIMEOUT_MS: "1500" })
        yield* first.waitFor(/^START /, 8)
        yield* insertJobs(
          [8, 9, 10, 11].map((n) => ({ n })),
          true,
        )
        first.child.kill("SIGTERM")
        assert.strictEqual((yield* first.exited).code, 0)

        const after = yield* sql<{
          n: number
          state: string
          attempt: number
          left: number
          errors: ReadonlyArray<{ kind: string }>
        }>`
          SELECT (args->>'n')::int AS n, state::text, attempt, max_attempts - attempt AS left, errors
          FROM jobs ORDER BY 1`
        const byN = (n: number) => after.find((r) => r.n === n)!
        for (const n of [0, 1, 2, 3])
          assert.strictEqual(byN(n).state, "completed", `job ${n} finished in the grace period`)
        for (const n of [4, 5, 6, 7]) {
          assert.strictEqual(byN(n).state, "available", `job ${n} was put back`)
          assert.strictEqual(byN(n).left, 3, `job ${n} kept its attempts`)
          assert.deepStrictEqual(
            byN(n).errors.map((e) => e.kind),
            ["interrupted"],
          )
        }
        for (const n of [8, 9, 10, 11]) {
          assert.deepStrictEqual([byN(n).state, byN(n).attempt], ["available", 0], `job ${n} was not claimed`)
        }
        const leases = yield* sql<{ id: string }>`SELECT id FROM job_workers WHERE id = ${first.id}`
        assert.deepStrictEqual(leases, [], "the lease was released")

        const second = yield* startWorker({ CONCURRENCY: "8" })
        yield* awaitCompleted(12)
        second.child.kill("SIGTERM")
        assert.strictEqual((yield* second.exited).code, 0)
        const effects = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM job_effects`
        assert.strictEqual(effects[0]!.n, 12, "every job's effect exactly once")
      }).pipe(Effect.scoped),
    60_000,
  )
})
