import { PgClient } from "@effect/sql-pg"
import { assert, layer } from "@effect/vitest"
import { Effect, Layer, Metric, Queue, Ref } from "effect"
import { SqlClient } from "effect/sql"
import * as Consumer from "../../src/consumer/Consumer.ts"
import type { LostRange, RoundOutcome } from "../../src/consumer/ConsumerRound.ts"
import * as ConsumerRound from "../../src/consumer/ConsumerRound.ts"
import * as StatementRound from "../../src/consumer/StatementRound.ts"
import * as JobMetrics from "../../src/jobs/JobMetrics.ts"
import { Jobs } from "../../src/jobs/Jobs.ts"
import type { NewEvent } from "../../src/log/Event.ts"
import { EventLog } from "../../src/log/EventLog.ts"
import * as LogModes from "../support/LogModes.ts"
import * as TestConsumer from "../support/TestConsumer.ts"
import * as TestDatabase from "../support/TestDatabase.ts"

const receivers = 3
const channel = "statement_round_test"

/**
 * The test consumer's fan-out as SQL: a write of its own (`fanout_effects`), a NOTIFY only a read
 * makes run (one per round with events, naming its last seq), and `TestConsumer.fanOutJobs` as
 * `wanted`.
 */
const fanOut = (name: string): StatementRound.StatementFanOut => ({
  ctes: (sql) => sql`
    noted AS (
      INSERT INTO fanout_effects (name, seq) SELECT ${name}, seq FROM ev
    ), told AS MATERIALIZED (
      SELECT pg_notify(${channel}, max(seq)::text) FROM ev HAVING count(*) > 0
    ), ${TestConsumer.wantedCte(sql, receivers)}`,
  sideEffects: ["told"],
})

const effectsTable = Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => sql`CREATE TABLE IF NOT EXISTS fanout_effects (name text, seq bigint)`,
)

/** The same consumer's round, transactional, with the same fan-out in TypeScript. */
const transactionalRound = (name: string, batchSize: number, onLoss = (_: LostRange) => Effect.void) =>
  Consumer.makeRound({
    name,
    batchSize,
    onLoss,
    fanOut: (events) => Effect.succeed(TestConsumer.fanOutJobs(events, receivers)),
  })

const appendMany = (n: number) =>
  Effect.gen(function* () {
    const log = yield* EventLog
    const events: Array<NewEvent> = Array.from({ length: n }, (_, j) => ({
      space: `s${j % 2}`,
      type: "item.created",
      actor: "u",
      payload: { j },
    }))
    // In a span, so every event carries a trace parent for its jobs to take over.
    yield* log.append(events).pipe(Effect.flatMap(log.sequenced), Effect.withSpan("test.append"))
    return (yield* log.head).seq
  })

/** A registered test consumer with `events` events after its cursor, and its statement round. */
const consumerWith = (name: string, events: number, batchSize: number) =>
  Effect.gen(function* () {
    yield* effectsTable
    yield* TestConsumer.register(name)
    const start = yield* TestConsumer.cursor(name)
    const head = yield* appendMany(events)
    return { start, head, statement: StatementRound.make({ name, batchSize, fanOut: fanOut(name) }) }
  })

/** Rounds until one is not a full batch; their outcomes. */
const rounds = <E, R>(round: Effect.Effect<RoundOutcome | undefined, E, R>) =>
  Effect.gen(function* () {
    const outcomes: Array<RoundOutcome | undefined> = []
    let outcome: RoundOutcome | undefined
    do {
      outcome = yield* round
      outcomes.push(outcome)
    } while (outcome?._tag === "Processed" && outcome.full)
    return outcomes
  })

interface JobRow {
  readonly key: string
  readonly kind: string
  readonly queue: string
  readonly args: unknown
  readonly priority: number
  readonly maxAttempts: number
  readonly state: string
  readonly traceParent: string | null
  readonly eventTraceParent: string | null
}

/** The consumer's jobs, their key with the consumer's name cut off, and the trace parent of their event. */
const jobsOf = (name: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql<JobRow>`
      SELECT substr(j.unique_key, ${name.length + 2}) AS key, j.kind, j.queue, j.args, j.priority,
             j.max_attempts AS "maxAttempts", j.state::text AS state, j.trace_parent AS "traceParent",
             e.trace_parent AS "eventTraceParent"
      FROM jobs AS j JOIN event_log AS e ON e.seq = (j.args->>'seq')::bigint
      WHERE j.unique_key LIKE ${`${name}:%`} ORDER BY e.seq, j.args->>'receiver'`,
  )

const suppressedTotal = Effect.map(Metric.value(JobMetrics.insertSuppressed), (s) => s.count)

for (const mode of LogModes.modes) {
  const Live = Layer.mergeAll(LogModes.eventLog(mode), Jobs.layer).pipe(Layer.provideMerge(TestDatabase.layer()))
  layer(Live, { excludeTestServices: true })(`Statement round (${mode})`, (it) => {
    it.effect(
      "StatementRoundCreatesOnce: the framework's round with a test consumer's SQL fan-out creates each job once with the framework's unique key, moves the cursor, runs the fan-out's writes and NOTIFY, and agrees with the transactional round",
      () =>
        Effect.gen(function* () {
          const sql = yield* SqlClient.SqlClient
          const pg = yield* PgClient.PgClient
          const name = "statement"
          const twin = "statement_twin"
          yield* TestConsumer.register(twin)
          const told = yield* pg.listen(channel)
          const { start, head, statement: round } = yield* consumerWith(name, 25, 10)

          const outcomes = yield* rounds(round)
          assert.deepStrictEqual(
            outcomes.map((o) => (o?._tag === "Processed" ? [o.fromSeq, o.toSeq, o.events, o.jobs, o.full] : o?._tag)),
            [
              [start + 1n, start + 10n, 10, 10 * receivers, true],
              [start + 11n, start + 20n, 10, 10 * receivers, true],
              [start + 21n, head, 5, 5 * receivers, false],
            ],
          )
          assert.strictEqual(yield* TestConsumer.cursor(name), head, "the cursor moved to the head")
          yield* TestConsumer.assertExactlyOnce(name, start, head, receivers)
          const jobs = yield* jobsOf(name)
          assert.strictEqual(jobs.length, 25 * receivers)
          for (const job of jobs) {
            const { seq, receiver } = job.args as { seq: string; receiver: string }
            assert.strictEqual(job.key, ConsumerRound.uniqueKey(name, BigInt(seq), receiver).slice(name.length + 1))
            assert.strictEqual(job.traceParent, job.eventTraceParent, "the job carries its event's trace parent")
          }
          assert.isNotNull(jobs[0]!.traceParent)
          const [effects] = yield* sql<{
            n: number
          }>`SELECT count(*)::int AS n FROM fanout_effects WHERE name = ${name}`
          assert.strictEqual(effects!.n, 25, "the fan-out's own write ran for every event, once")
          const notified = yield* Effect.forEach([1, 2, 3], () => Queue.take(told).pipe(Effect.timeout("10 seconds")))
          assert.deepStrictEqual(
            notified.map((n) => BigInt(n.payload)),
            [start + 10n, start + 20n, head],
            "the fan-out's side effect ran in each round",
          )

          // The transactional round of a twin consumer, over the same events: the same outcomes and
          // the same jobs (the unique key differs only in the consumer's name).
          const twinOutcomes = yield* rounds(yield* transactionalRound(twin, 10))
          assert.deepStrictEqual(twinOutcomes, outcomes)
          assert.deepStrictEqual(yield* jobsOf(twin), jobs)

          // A second round after the first: caught up, nothing new.
          assert.deepStrictEqual(yield* round, { _tag: "CaughtUp", lastSeq: head })
          assert.strictEqual((yield* jobsOf(name)).length, 25 * receivers)

          // The same batch again (the cursor put back): the unique key suppresses every job, and the
          // framework counts them.
          const suppressedBefore = yield* suppressedTotal
          yield* sql`UPDATE event_consumer_cursors SET last_seq = ${start} WHERE name = ${name}`
          const again = yield* rounds(round)
          assert.deepStrictEqual(
            again.map((o) => (o?._tag === "Processed" ? [o.jobs, o.suppressed] : o?._tag)),
            [
              [0, 10 * receivers],
              [0, 10 * receivers],
              [0, 5 * receivers],
            ],
          )
          assert.strictEqual((yield* suppressedTotal) - suppressedBefore, 25 * receivers)
          assert.strictEqual((yield* jobsOf(name)).length, 25 * receivers, "nothing new")
          assert.strictEqual(yield* TestConsumer.cursor(name), head)
        }).pipe(Effect.scoped),
    )

    it.effect(
      "StatementRoundHoleFallsBack: a hole in the log, inside the batch or up to the head, makes the statement round write nothing and return undefined; the consumer's round then reports the loss",
      () =>
        Effect.gen(function* () {
          const sql = yield* SqlClient.SqlClient
          const name = "statement_hole"
          const { start, head, statement } = yield* consumerWith(name, 10, 100)
          const jobCount = Effect.map(jobsOf(name), (jobs) => jobs.length)

          // Retention removes events; here rows go directly.
          yield* sql`DELETE FROM event_log WHERE seq = ${start + 4n}`
          assert.strictEqual(yield* statement, undefined)
          assert.strictEqual(yield* TestConsumer.cursor(name), start, "the cursor stayed")
          assert.strictEqual(yield* jobCount, 0, "no job")

          const losses = yield* Ref.make<Array<LostRange>>([])
          const round = yield* Consumer.makeRound({
            name,
            batchSize: 100,
            onLoss: (lost) => Ref.update(losses, (l) => [...l, lost]),
            fanOut: (events) => Effect.succeed(TestConsumer.fanOutJobs(events, receivers)),
            oneStatement: (r) => StatementRound.make({ ...r, fanOut: fanOut(name) }),
          })
          const outcome = yield* round
          assert.strictEqual(outcome._tag, "Processed")
          assert.deepStrictEqual(yield* Ref.get(losses), [{ firstSeq: start + 4n, lastSeq: start + 4n }])
          assert.strictEqual(yield* TestConsumer.cursor(name), head)
          assert.strictEqual(yield* jobCount, 9 * receivers)

          // Everything after the cursor gone: no event to read, but the head is ahead.
          const more = yield* appendMany(4)
          yield* sql`DELETE FROM event_log WHERE seq > ${head}`
          assert.strictEqual(yield* statement, undefined)
          assert.strictEqual(yield* TestConsumer.cursor(name), head, "the cursor stayed")
          assert.strictEqual((yield* round)._tag, "Processed")
          assert.deepStrictEqual((yield* Ref.get(losses)).at(-1), { firstSeq: head + 1n, lastSeq: more })
          assert.strictEqual(yield* TestConsumer.cursor(name), more)
          assert.deepStrictEqual(yield* statement, { _tag: "CaughtUp", lastSeq: more })
        }),
    )

    it.effect(
      "StatementRoundLocked: a held cursor row makes the statement round return Locked at once, writing nothing",
      () =>
        Effect.gen(function* () {
          const name = "statement_locked"
          const { start, statement } = yield* consumerWith(name, 5, 100)
          const holder = yield* TestConsumer.holdCursor(name)
          assert.deepStrictEqual(yield* statement, { _tag: "Locked" })
          assert.isTrue(yield* holder.held, "it returned while the row was held")
          yield* holder.release
          assert.strictEqual(yield* TestConsumer.cursor(name), start)
          assert.strictEqual((yield* jobsOf(name)).length, 0, "nothing written")
          assert.strictEqual((yield* statement)?._tag, "Processed", "free again once released")
        }),
    )
  })
}
