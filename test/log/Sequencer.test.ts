import { assert, layer } from "@effect/vitest"
import { Deferred, Effect, Fiber, Layer, Metric, Queue } from "effect"
import { SqlClient } from "effect/sql"
import { TestClock } from "effect/testing"
import type { NewEvent } from "../../src/log/Event.ts"
import { type Appended, AppendNotCommitted, EventLog } from "../../src/log/EventLog.ts"
import * as EventLogMetrics from "../../src/log/EventLogMetrics.ts"
import * as Sequencer from "../../src/log/Sequencer.ts"
import * as SequencerBatch from "../../src/log/SequencerBatch.ts"
import * as TestDatabase from "../support/TestDatabase.ts"

// No sequencer in the layer: each test runs its own.
const Live = EventLog.layerPostCommit.pipe(Layer.provideMerge(TestDatabase.layer({ maxConnections: 12 })))

const events = (tag: string, n: number): ReadonlyArray<NewEvent> =>
  Array.from({ length: n }, (_, i) => ({ space: "s", type: "t", actor: "a", payload: { tag, i } }))

/** The log as (seq, tag) pairs, in seq order. */
const contents = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  return yield* sql<{ seq: bigint; tag: string }>`SELECT seq, payload->>'tag' AS tag FROM event_log ORDER BY seq`
})

const assertGapless = (rows: ReadonlyArray<{ readonly seq: bigint }>) =>
  assert.deepStrictEqual(
    rows.map((r) => r.seq),
    rows.map((_, i) => BigInt(i + 1)),
    "seqs are exactly 1..N",
  )

const gauge = (g: Metric.Gauge<number>) => Effect.map(Metric.value(g), (s) => s.value)

/** Frees the lease, whatever an earlier test left behind. */
const freeLease = Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => sql`UPDATE event_sequencer SET holder = NULL, expires_at = '-infinity'`,
)

/** A sequencer's loop, forked, with its steps on a queue. */
const start = (options: Sequencer.SequencerOptions) =>
  Effect.gen(function* () {
    const steps = yield* Queue.unbounded<Sequencer.Step>()
    const sequencer = yield* Sequencer.make({ ...options, onStep: (s) => Queue.offer(steps, s).pipe(Effect.asVoid) })
    const fiber = yield* Effect.forkChild(sequencer.loop)
    /** The next step of the given kind (earlier ones of other kinds are passed over). */
    const next = <T extends Sequencer.Step["_tag"]>(tag: T) =>
      Effect.gen(function* () {
        for (;;) {
          const step = yield* Queue.take(steps)
          if (step._tag === tag) return step as Extract<Sequencer.Step, { _tag: T }>
        }
      })
    return { fiber, next, sequencer }
  })

layer(Live, { excludeTestServices: true })("Sequencer", (it) => {
  it.effect(
    "SequencerHeldBackByLongTransaction: a long write transaction holds back its own appends, which the metric shows; other appends are numbered meanwhile; nothing is skipped when it ends",
    () =>
      Effect.gen(function* () {
        const log = yield* EventLog
        const sql = yield* SqlClient.SqlClient
        yield* Layer.build(Sequencer.layer({ pollInterval: "2 millis" }))
        yield* sql`CREATE TABLE elsewhere (n int)`

        // A long transaction that writes somewhere else entirely holds nothing back.
        const otherWriter = yield* Deferred.make<void>()
        const otherWrote = yield* Deferred.make<void>()
        const other = yield* sql
          .withTransaction(
            Effect.gen(function* () {
              yield* sql`INSERT INTO elsewhere VALUES (1)`
              yield* Deferred.succeed(otherWrote, undefined)
              yield* Deferred.await(otherWriter)
            }),
          )
          .pipe(Effect.forkChild)
        yield* Deferred.await(otherWrote)
        yield* Sequencer.sampleGauges()
        assert.strictEqual(yield* gauge(EventLogMetrics.openAppendAge), 0, "a transaction that appended nothing")

        // A long transaction that appends, then stays open.
        const release = yield* Deferred.make<void>()
        const appendedLong = yield* Deferred.make<Appended>()
        const long = yield* sql
          .withTransaction(
            Effect.gen(function* () {
              const appended = yield* log.append(events("long", 2))
              yield* Deferred.succeed(appendedLong, appended)
              yield* Deferred.await(release)
              return appended
            }),
          )
          .pipe(Effect.forkChild)
        yield* Deferred.await(appendedLong)

        // Appends committed after it are numbered while it is open: nothing waits for it but its own.
        const before = yield* Effect.forEach([1, 2, 3], (k) =>
          Effect.flatMap(log.append(events(`short${k}`, k)), log.sequenced),
        )
        assert.deepStrictEqual(
          before.map((a) => [a.firstSeq, a.lastSeq]),
          [
            [1n, 1n],
            [2n, 3n],
            [4n, 6n],
          ],
        )
        yield* Sequencer.sampleGauges()
        assert.isAbove(yield* gauge(EventLogMetrics.openAppendAge), 0, "the open appender is visible in the metric")
        assert.strictEqual(yield* gauge(EventLogMetrics.unsequenced), 0, "nothing committed is waiting")
        assert.deepStrictEqual(
          (yield* contents).map((r) => r.tag),
          ["short1", "short2", "short2", "short3", "short3", "short3"],
          "the open transaction's events are not in the log",
        )

        yield* Deferred.succeed(release, undefined)
        const longAppended = yield* Fiber.join(long)
        const numbered = yield* log.sequenced(longAppended)
        assert.deepStrictEqual([numbered.firstSeq, numbered.lastSeq], [7n, 8n], "the next seqs, once it committed")
        const after = yield* Effect.flatMap(log.append(events("after", 1)), log.sequenced)
        assert.strictEqual(after.firstSeq, 9n)

        const rows = yield* contents
        assertGapless(rows)
        assert.deepStrictEqual(
          rows.map((r) => r.tag),
          ["short1", "short2", "short2", "short3", "short3", "short3", "long", "long", "after"],
        )
        assert.strictEqual((yield* log.head).seq, 9n)
        yield* Sequencer.sampleGauges()
        assert.strictEqual(yield* gauge(EventLogMetrics.openAppendAge), 0)
        yield* Deferred.succeed(otherWriter, undefined)
        yield* Fiber.join(other)
      }).pipe(Effect.scoped),
  )

  it.effect("sequenced fails with AppendNotCommitted for an append whose transaction rolled back", () =>
    Effect.gen(function* () {
      const log = yield* EventLog
      const sql = yield* SqlClient.SqlClient
      yield* Layer.build(Sequencer.layer({ pollInterval: "2 millis" }))
      const appended = yield* Deferred.make<Appended>()
      yield* sql
        .withTransaction(
          Effect.gen(function* () {
            yield* Deferred.succeed(appended, yield* log.append(events("rolled back", 1)))
            return yield* Effect.die("roll it back")
          }),
        )
        .pipe(Effect.exit)
      const error = yield* log.sequenced(yield* Deferred.await(appended)).pipe(Effect.flip)
      assert.instanceOf(error, AppendNotCommitted)
    }).pipe(Effect.scoped),
  )

  it.effect(
    "SequencerLeaseTakeover: one holder at a time; a standby takes the lease once it runs out, and the old holder's batches are refused; timed by the TestClock",
    () =>
      Effect.gen(function* () {
        const log = yield* EventLog
        const sql = yield* SqlClient.SqlClient
        const options = { lease: "5 seconds", standbyInterval: "1 second", pollInterval: "1 second" } as const
        const base = (yield* log.head).seq
        yield* freeLease
        const a = yield* start({ ...options, holder: "a" })
        yield* a.next("Acquired")
        assert.strictEqual((yield* a.next("Batch")).appends, 0, "the holder polls at once")
        const b = yield* start({ ...options, holder: "b" })
        yield* b.next("NotAcquired")

        yield* log.append(events("first", 2))
        yield* TestClock.adjust("1 second")
        const first = yield* a.next("Batch")
        assert.deepStrictEqual([first.firstSeq, first.lastSeq], [base + 1n, base + 2n], "numbered at the next poll")
        yield* b.next("NotAcquired")

        // The holder stops without giving the lease up (a process that hangs or dies).
        yield* Fiber.interrupt(a.fiber)
        yield* log.append(events("second", 3))
        yield* TestClock.adjust("1 second")
        yield* b.next("NotAcquired")
        assert.strictEqual((yield* log.head).seq, base + 2n, "nobody numbers while the lease holds")

        // Its lease runs out (database time).
        yield* sql`UPDATE event_sequencer SET expires_at = clock_timestamp() WHERE holder = 'a'`
        yield* TestClock.adjust("1 second")
        yield* b.next("Acquired")
        const second = yield* b.next("Batch")
        assert.deepStrictEqual([second.firstSeq, second.lastSeq], [base + 3n, base + 5n])

        // The old holder, were it still running, would have its batches refused.
        yield* log.append(events("third", 1))
        const refused = yield* SequencerBatch.run("a", 100)
        assert.deepStrictEqual(refused, { leased: false, appends: 0, events: 0, firstSeq: null, lastSeq: null })

        // The new holder goes on numbering, and renews a third of the way into its lease.
        yield* TestClock.adjust("1 second")
        const third = yield* b.next("Batch")
        assert.deepStrictEqual([third.firstSeq, third.lastSeq], [base + 6n, base + 6n])
        const [lease] = yield* sql<{ expires: Date }>`SELECT expires_at AS expires FROM event_sequencer`
        yield* TestClock.adjust("1 second")
        yield* b.next("Renewed")
        const [renewed] = yield* sql<{ holder: string; expires: Date }>`
          SELECT holder, expires_at AS expires FROM event_sequencer`
        assert.strictEqual(renewed!.holder, "b")
        assert.isAbove(renewed!.expires.getTime(), lease!.expires.getTime(), "renewed")

        // Stopping gives the lease up at once.
        yield* Fiber.interrupt(b.fiber)
        yield* b.sequencer.release
        const [free] = yield* sql<{ free: boolean }>`SELECT expires_at < clock_timestamp() AS free FROM event_sequencer`
        assert.isTrue(free!.free)
        assertGapless(yield* contents)
      }).pipe(Effect.provide(TestClock.layer())),
  )

  it.effect(
    "SequencerPartitionMissing: with no partition for today the batch fails and numbers nothing; once it exists, the waiting appends are numbered",
    () =>
      Effect.gen(function* () {
        const log = yield* EventLog
        const sql = yield* SqlClient.SqlClient
        const before = yield* log.head
        const [today] = yield* sql<{ name: string }>`
          SELECT 'event_log_' || to_char((clock_timestamp() AT TIME ZONE 'UTC')::date, 'YYYYMMDD') AS name`
        yield* sql.unsafe(`ALTER TABLE event_log DETACH PARTITION ${today!.name}`)
        const appended = yield* log.append(events("waiting", 2))
        yield* freeLease
        const s = yield* start({ holder: "p", standbyInterval: "1 second", pollInterval: "1 second" })
        yield* s.next("Acquired")
        yield* s.next("Failed")
        assert.deepStrictEqual(yield* log.head, before, "nothing numbered")
        const [pending] = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM event_log_pending`
        assert.strictEqual(pending!.n, 1, "the append waits, not lost")

        yield* sql.unsafe(`DROP TABLE ${today!.name}`)
        yield* sql`SELECT event_log_ensure_partitions(interval '1 day')`
        yield* TestClock.adjust("1 second")
        const batch = yield* s.next("Batch")
        assert.strictEqual(batch.events, 2)
        const numbered = yield* TestClock.withLive(log.sequenced(appended))
        assert.strictEqual(numbered.lastSeq, before.seq + 2n)
        yield* Fiber.interrupt(s.fiber)
      }).pipe(Effect.provide(TestClock.layer())),
  )
})
