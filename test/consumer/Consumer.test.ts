import { assert, layer } from "@effect/vitest"
import { Deferred, Effect, Fiber, Layer, Metric, Ref, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { TestClock } from "effect/testing"
import * as Consumer from "../../src/consumer/Consumer.ts"
import * as ConsumerMetrics from "../../src/consumer/ConsumerMetrics.ts"
import type { LostRange } from "../../src/consumer/ConsumerRound.ts"
import * as JobMetrics from "../../src/jobs/JobMetrics.ts"
import { Jobs } from "../../src/jobs/Jobs.ts"
import type { Event, NewEvent } from "../../src/log/Event.ts"
import { EventLog } from "../../src/log/EventLog.ts"
import * as LogModes from "../support/LogModes.ts"
import * as TestConsumer from "../support/TestConsumer.ts"
import * as TestDatabase from "../support/TestDatabase.ts"

const appendMany = (n: number, perTxn = 10) =>
  Effect.gen(function* () {
    const log = yield* EventLog
    for (let i = 0; i < n; i += perTxn) {
      const batch: Array<NewEvent> = []
      for (let j = i; j < Math.min(n, i + perTxn); j++) {
        batch.push({ space: `s${j % 3}`, type: "item.created", actor: "u", payload: { j } })
      }
      yield* log.append(batch)
    }
    yield* LogModes.settled
    return (yield* log.head).seq
  })

class FanOutFailed extends Schema.TaggedError<FanOutFailed>()("FanOutFailed", {}) {}

const noLoss = (_: LostRange) => Effect.void

const suppressedTotal = Effect.map(Metric.value(JobMetrics.insertSuppressed), (s) => s.count)

for (const mode of LogModes.modes) {
  const Live = Layer.mergeAll(LogModes.eventLog(mode), Jobs.layer).pipe(
    Layer.provideMerge(TestDatabase.layer({ maxConnections: 12 })),
  )
  layer(Live, { excludeTestServices: true })(`Consumer round (${mode})`, (it) => {
    it.effect(
      "ConsumerCrashMidRoundNoDuplicates: terminated backend, fan-out failure, defect and interruption roll back; the next round creates the batch once",
      () =>
        Effect.gen(function* () {
          const sql = yield* SqlClient.SqlClient
          const other = yield* TestDatabase.otherClient
          yield* sql`CREATE TABLE fanout_effects (name text, seq bigint)`
          const suppressedBefore = yield* suppressedTotal
          const faults = ["terminate", "fail", "die", "interrupt"] as const
          for (const fault of faults) {
            const name = `crash_${fault}`
            yield* TestConsumer.register(name)
            const start = yield* TestConsumer.cursor(name)
            const head = yield* appendMany(40)
            const armed = yield* Ref.make(true)
            const inFanOut = yield* Deferred.make<void>()
            const round = yield* Consumer.makeRound({
              name,
              batchSize: 100,
              onLoss: noLoss,
              fanOut: (events: ReadonlyArray<Event>) =>
                Effect.gen(function* () {
                  // The fan-out's own writes share the round's fate.
                  for (const e of events) yield* sql`INSERT INTO fanout_effects VALUES (${name}, ${e.seq})`
                  if (!(yield* Ref.getAndSet(armed, false))) return TestConsumer.fanOutJobs(events, 3)
                  switch (fault) {
                    case "terminate": {
                      const [row] = yield* sql<{ pid: number }>`SELECT pg_backend_pid() AS pid`
                      yield* other`SELECT pg_terminate_backend(${row!.pid})`
                      return TestConsumer.fanOutJobs(events, 3)
                    }
                    case "fail":
                      return yield* new FanOutFailed()
                    case "die":
                      return yield* Effect.die("fan-out defect")
                    case "interrupt":
                      yield* Deferred.succeed(inFanOut, undefined)
                      return yield* Effect.never
                  }
                }),
            })
            if (fault === "interrupt") {
              const fiber = yield* Effect.forkChild(round)
              yield* Deferred.await(inFanOut)
              yield* Fiber.interrupt(fiber)
            } else {
              const failed = yield* Effect.exit(round)
              assert.isTrue(failed._tag === "Failure", `${fault}: the round failed`)
            }
            assert.strictEqual(yield* TestConsumer.cursor(name), start, `${fault}: cursor unchanged`)
            const [jobs] = yield* sql<{
              n: number
            }>`SELECT count(*)::int AS n FROM jobs WHERE unique_key LIKE ${`${name}:%`}`
            assert.strictEqual(jobs!.n, 0, `${fault}: no jobs survived the failed round`)

            const next = yield* round
            assert.strictEqual(next._tag, "Processed", fault)
            assert.strictEqual(yield* TestConsumer.cursor(name), head)
            yield* TestConsumer.assertExactlyOnce(name, start, head, 3)
            const [effects] = yield* sql<{ n: number; distinct: number }>`
            SELECT count(*)::int AS n, count(DISTINCT seq)::int AS distinct FROM fanout_effects WHERE name = ${name}`
            assert.deepStrictEqual({ ...effects! }, { n: 40, distinct: 40 }, `${fault}: fan-out writes once`)
          }
          assert.strictEqual(yield* suppressedTotal, suppressedBefore, "the unique key never had to catch a duplicate")
        }),
    )

    it.effect("ConsumerRoundJobsAndCursorCommitTogether: another connection sees both or neither", () =>
      Effect.gen(function* () {
        const other = yield* TestDatabase.otherClient
        const name = "atomic"
        yield* TestConsumer.register(name)
        const start = yield* TestConsumer.cursor(name)
        const receivers = 4
        yield* appendMany(600)
        const round = yield* Consumer.makeRound({
          name,
          batchSize: 50,
          onLoss: noLoss,
          // A slow fan-out widens the window in which a torn state could be seen.
          fanOut: (events) => Effect.as(Effect.sleep("2 millis"), TestConsumer.fanOutJobs(events, receivers)),
        })
        const done = yield* Deferred.make<void>()
        // One statement per observation: one snapshot of both the cursor and the jobs.
        const observer = Effect.gen(function* () {
          let observations = 0
          const seen = new Set<bigint>()
          while (!(yield* Deferred.isDone(done))) {
            const [row] = yield* other<{ lastSeq: bigint; jobs: number }>`
            SELECT (SELECT last_seq FROM event_consumer_cursors WHERE name = ${name}) AS "lastSeq",
                   (SELECT count(*)::int FROM jobs WHERE unique_key LIKE ${`${name}:%`}) AS jobs`
            assert.strictEqual(BigInt(row!.jobs), (row!.lastSeq - start) * BigInt(receivers), "jobs match the cursor")
            seen.add(row!.lastSeq)
            observations++
          }
          return { observations, cursors: seen.size }
        })
        const fiber = yield* Effect.forkChild(observer)
        let outcome = yield* round
        while (outcome._tag === "Processed") outcome = yield* round
        yield* Deferred.succeed(done, undefined)
        const seen = yield* Fiber.join(fiber)
        assert.isAbove(seen.observations, 12, "observed throughout the rounds")
        assert.isAbove(seen.cursors, 3, "observed several cursor positions")
        yield* TestConsumer.assertExactlyOnce(name, start, yield* TestConsumer.cursor(name), receivers)
      }),
    )

    it.effect("ConsumerRoundLockedEndsAtOnce: a held cursor row makes the round return Locked without waiting", () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const name = "locked"
        yield* TestConsumer.register(name)
        const start = yield* TestConsumer.cursor(name)
        yield* appendMany(5)
        const fanOuts = yield* Ref.make(0)
        const round = yield* Consumer.makeRound({
          name,
          batchSize: 100,
          onLoss: noLoss,
          fanOut: (events) =>
            Effect.as(
              Ref.update(fanOuts, (n) => n + 1),
              TestConsumer.fanOutJobs(events, 1),
            ),
        })
        const holder = yield* TestConsumer.holdCursor(name)
        const outcome = yield* round
        // It returned while the lock is still held: it did not wait for it.
        assert.isTrue(yield* holder.held)
        assert.deepStrictEqual(outcome, { _tag: "Locked" })
        assert.strictEqual(yield* Ref.get(fanOuts), 0, "no work")
        const [jobs] = yield* sql<{
          n: number
        }>`SELECT count(*)::int AS n FROM jobs WHERE unique_key LIKE ${`${name}:%`}`
        assert.strictEqual(jobs!.n, 0, "nothing written")
        yield* holder.release
        assert.strictEqual(yield* TestConsumer.cursor(name), start)
        assert.strictEqual((yield* round)._tag, "Processed", "free again once released")
      }),
    )

    it.effect(
      "RoundCallsHandleLost: a range missing after last_seq reaches the loss handler once, with its bounds",
      () =>
        Effect.gen(function* () {
          const sql = yield* SqlClient.SqlClient
          const name = "lossy"
          yield* TestConsumer.register(name)
          const start = yield* TestConsumer.cursor(name)
          const head = yield* appendMany(30)
          // Retention removes the oldest events; here rows go directly.
          yield* sql`DELETE FROM event_log WHERE seq > ${start} AND seq <= ${start + 12n}`
          const losses = yield* Ref.make<Array<LostRange>>([])
          const round = yield* Consumer.makeRound({
            name,
            batchSize: 10,
            onLoss: (lost) => Ref.update(losses, (l) => [...l, lost]),
            fanOut: (events) => Effect.succeed(TestConsumer.fanOutJobs(events, 1)),
          })
          let outcome = yield* round
          while (outcome._tag === "Processed" && outcome.full) outcome = yield* round
          assert.deepStrictEqual(yield* Ref.get(losses), [{ firstSeq: start + 1n, lastSeq: start + 12n }])
          assert.strictEqual(yield* TestConsumer.cursor(name), head)
          yield* TestConsumer.assertExactlyOnce(name, start + 12n, head, 1)
          assert.strictEqual((yield* round)._tag, "CaughtUp")

          // Everything after the cursor gone: the whole range up to the head is reported, the cursor moves on.
          const more = yield* appendMany(5)
          yield* sql`DELETE FROM event_log WHERE seq > ${head}`
          const lastRound = yield* round
          assert.strictEqual(lastRound._tag, "Processed")
          assert.deepStrictEqual((yield* Ref.get(losses)).at(-1), { firstSeq: head + 1n, lastSeq: more })
          assert.strictEqual((yield* Ref.get(losses)).length, 2)
          assert.strictEqual(yield* TestConsumer.cursor(name), more)
        }),
    )

    it.effect("a consumer without a cursor row fails at start and says so", () =>
      Effect.gen(function* () {
        const error = yield* Consumer.checkRegistered("nobody").pipe(Effect.flip)
        assert.instanceOf(error, Consumer.ConsumerNotRegistered)
        assert.match(error.message, /consumer "nobody" has no row in event_consumer_cursors/)
        assert.include(error.registered, "webhooks")
        assert.include(error.registered, "push")
      }),
    )

    it.effect("ConsumerLagGauges: lag and pending age before and after rounds, age from the TestClock", () =>
      Effect.gen(function* () {
        const name = "gauged"
        const lag = Metric.withAttributes(ConsumerMetrics.lag, { consumer: name })
        const age = Metric.withAttributes(ConsumerMetrics.pendingAge, { consumer: name })
        yield* TestConsumer.register(name)
        const log = yield* EventLog
        const start = yield* TestConsumer.cursor(name)
        // Live time for the wait on the sequencer; the ages below are the TestClock's.
        const first = yield* TestClock.withLive(
          LogModes.appendSequenced(
            Array.from({ length: 8 }, () => ({ space: "s", type: "t", actor: "a", payload: {} })),
          ),
        )
        yield* TestClock.withLive(LogModes.appendSequenced([{ space: "s", type: "t", actor: "a", payload: {} }]))
        const [oldest] = yield* log.read(start, 1)
        yield* TestClock.setTime(oldest!.occurredAt.getTime() + 90_000)

        yield* Consumer.sampleGauges(name)
        assert.strictEqual((yield* Metric.value(lag)).value, 9)
        assert.strictEqual((yield* Metric.value(age)).value, 90)

        const round = yield* Consumer.makeRound({
          name,
          batchSize: 5,
          onLoss: noLoss,
          fanOut: (events) => Effect.succeed(TestConsumer.fanOutJobs(events, 1)),
        })
        yield* TestClock.adjust("30 seconds")
        assert.strictEqual((yield* round)._tag, "Processed")
        // Four left; the oldest of them was appended with the first eight.
        assert.strictEqual((yield* Metric.value(lag)).value, 4)
        assert.strictEqual(
          (yield* Metric.value(age)).value,
          (oldest!.occurredAt.getTime() + 120_000 - first.occurredAt.getTime()) / 1000,
        )
        yield* round
        assert.strictEqual((yield* Metric.value(lag)).value, 0)
        assert.strictEqual((yield* Metric.value(age)).value, 0)
        yield* Consumer.sampleGauges(name)
        assert.strictEqual((yield* Metric.value(lag)).value, 0)
        assert.strictEqual((yield* Metric.value(age)).value, 0)
      }).pipe(Effect.provide(TestClock.layer())),
    )
  })
}
