import { assert, layer } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber, Layer, Metric, Option, Queue } from "effect"
import { SqlClient } from "effect/sql"
import { TestClock } from "effect/testing"
import type { NewEvent } from "../../src/log/Event.ts"
import { type Appended, AppendNotCommitted, EventLog } from "../../src/log/EventLog.ts"
import * as EventLogMetrics from "../../src/log/EventLogMetrics.ts"
import * as Sequencer from "../../src/log/Sequencer.ts"
import * as SequencerBatch from "../../src/log/SequencerBatch.ts"
import * as SequencerBatchInPlace from "../../src/log/SequencerBatchInPlace.ts"
import { NotificationStream } from "../../src/platform/NotificationStream.ts"
import { eventually } from "../support/Eventually.ts"
import * as TestDatabase from "../support/TestDatabase.ts"

type Placement = NonNullable<Sequencer.SequencerOptions["placement"]>

// No sequencer in the layer: each test runs its own. `pending` is the post_commit mode bothy keeps;
// `in_place` the variant measured beside it (docs/decisions.md), tested as long as it is in src.
const Live = (placement: Placement) =>
  (placement === "pending" ? EventLog.layerPostCommit : EventLog.layerPostCommitInPlace).pipe(
    Layer.provideMerge(TestDatabase.layer({ maxConnections: 12 })),
  )

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
const startWith = (placement: Placement) => (options: Sequencer.SequencerOptions) =>
  Effect.gen(function* () {
    const steps = yield* Queue.unbounded<Sequencer.Step>()
    const sequencer = yield* Sequencer.make({
      ...options,
      placement,
      onStep: (s) => Queue.offer(steps, s).pipe(Effect.asVoid),
    })
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

/** The name of today's partition of `event_log` (UTC). */
const todaysPartition = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  Effect.map(
    sql<{ name: string }>`
      SELECT 'event_log_' || to_char((clock_timestamp() AT TIME ZONE 'UTC')::date, 'YYYYMMDD') AS name`,
    ([row]) => row!.name,
  ),
)

/**
 * With today's partition detached, the sequencer `s` fails its batch and numbers nothing while
 * `appended` (2 events) waits (`waiting` counts `waits` rows); once the partition is back, its next
 * batch numbers both events after `before`.
 */
const failsUntilTheLeafIsBack = (
  s: {
    readonly next: <T extends Sequencer.Step["_tag"]>(tag: T) => Effect.Effect<Extract<Sequencer.Step, { _tag: T }>>
  },
  options: {
    readonly before: { readonly seq: bigint; readonly epoch: number }
    readonly appended: Appended
    readonly today: string
    readonly waiting: Effect.Effect<ReadonlyArray<{ readonly n: number }>, unknown>
    readonly waits: number
  },
) =>
  Effect.gen(function* () {
    const log = yield* EventLog
    const sql = yield* SqlClient.SqlClient
    yield* s.next("Acquired")
    yield* s.next("Failed")
    assert.deepStrictEqual(yield* log.head, options.before, "nothing numbered")
    const [waiting] = yield* Effect.orDie(options.waiting)
    assert.strictEqual(waiting!.n, options.waits, "the append waits, not lost")
    yield* sql.unsafe(`DROP TABLE ${options.today}`)
    yield* sql`SELECT event_log_ensure_partitions(interval '1 day')`
    yield* TestClock.adjust("1 second")
    const batch = yield* s.next("Batch")
    assert.strictEqual(batch.events, 2)
    const numbered = yield* TestClock.withLive(log.sequenced(options.appended))
    assert.strictEqual(numbered.lastSeq, options.before.seq + 2n)
  })

/** A batch of `placement` for `holder`, as the sequencer runs it (the in-place one from no bounds). */
const batchOf = (placement: Placement, holder: string) =>
  placement === "pending"
    ? SequencerBatch.run(holder, 100)
    : Effect.map(SequencerBatchInPlace.run(holder, 100, { from: undefined, after: 0n }), ({ marks: _, ...r }) => r)

for (const placement of ["pending", "in_place"] as const) {
  const start = startWith(placement)
  layer(Live(placement), { excludeTestServices: true })(`Sequencer (${placement})`, (it) => {
    it.effect(
      "SequencerHeldBackByLongTransaction: a long write transaction holds back its own appends, which the metric shows; other appends are numbered meanwhile; nothing is skipped when it ends",
      () =>
        Effect.gen(function* () {
          const log = yield* EventLog
          const sql = yield* SqlClient.SqlClient
          yield* Layer.build(Sequencer.layer({ pollInterval: "2 millis", placement }))
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
          yield* Sequencer.sampleGauges(placement)
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
          yield* Sequencer.sampleGauges(placement)
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
          yield* Sequencer.sampleGauges(placement)
          assert.strictEqual(yield* gauge(EventLogMetrics.openAppendAge), 0)
          yield* Deferred.succeed(otherWriter, undefined)
          yield* Fiber.join(other)
        }).pipe(Effect.scoped),
    )

    it.effect(
      "SequencerBusyInterval: after a batch that numbered appends the holder looks again after busyInterval, after an empty one after pollInterval; timed by the TestClock",
      () =>
        Effect.gen(function* () {
          const log = yield* EventLog
          const base = (yield* log.head).seq
          yield* freeLease
          const s = yield* start({ holder: "p", pollInterval: "10 seconds", busyInterval: "100 millis" })
          yield* s.next("Acquired")
          assert.strictEqual((yield* s.next("Batch")).appends, 0, "the holder polls at once")
          yield* log.append(events("polled", 1))
          yield* TestClock.adjust("10 seconds")
          assert.strictEqual((yield* s.next("Batch")).lastSeq, base + 1n, "idle: numbered at the poll")
          // Appends are coming: the holder looks again a busy interval later, not a poll later.
          yield* log.append(events("busy", 2))
          yield* TestClock.adjust("100 millis")
          assert.strictEqual((yield* s.next("Batch")).lastSeq, base + 3n, "busy: numbered a busy interval later")
          yield* TestClock.adjust("100 millis")
          assert.strictEqual((yield* s.next("Batch")).appends, 0, "nothing more came")
          yield* log.append(events("idle again", 1))
          yield* TestClock.adjust("10 seconds")
          assert.strictEqual((yield* s.next("Batch")).lastSeq, base + 4n, "idle again: numbered at the poll")
          yield* Fiber.interrupt(s.fiber)
        }).pipe(Effect.provide(TestClock.layer())),
    )

    it.effect("sequenced fails with AppendNotCommitted for an append whose transaction rolled back", () =>
      Effect.gen(function* () {
        const log = yield* EventLog
        const sql = yield* SqlClient.SqlClient
        yield* Layer.build(Sequencer.layer({ pollInterval: "2 millis", placement }))
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
          const options = {
            lease: "5 seconds",
            standbyInterval: "1 second",
            pollInterval: "1 second",
            busyInterval: "1 second",
          } as const
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
          const refused = yield* batchOf(placement, "a")
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
          const [free] = yield* sql<{
            free: boolean
          }>`SELECT expires_at < clock_timestamp() AS free FROM event_sequencer`
          assert.isTrue(free!.free)
          assertGapless(yield* contents)
        }).pipe(Effect.provide(TestClock.layer())),
    )

    if (placement === "pending") {
      it.effect(
        "SequencerPartitionMissing: with no partition for today the batch fails and numbers nothing; once it exists, the waiting appends are numbered",
        () =>
          Effect.gen(function* () {
            const log = yield* EventLog
            const sql = yield* SqlClient.SqlClient
            const before = yield* log.head
            const today = yield* todaysPartition
            yield* sql.unsafe(`ALTER TABLE event_log DETACH PARTITION ${today}`)
            const appended = yield* log.append(events("waiting", 2))
            yield* freeLease
            const s = yield* start({ holder: "p", standbyInterval: "1 second", pollInterval: "1 second" })
            yield* failsUntilTheLeafIsBack(s, {
              before,
              appended,
              today: today,
              waiting: sql<{ n: number }>`SELECT count(*)::int AS n FROM event_log_pending`,
              waits: 1,
            })
            yield* Fiber.interrupt(s.fiber)
          }).pipe(Effect.provide(TestClock.layer())),
      )
    } else {
      it.effect(
        "SequencerPartitionMissing: with no partition for now an append fails loudly; a waiting append whose numbering would move it into a missing leaf fails the batch, which numbers nothing, until the leaf exists",
        () =>
          Effect.gen(function* () {
            const log = yield* EventLog
            const sql = yield* SqlClient.SqlClient
            const before = yield* log.head
            const today = yield* todaysPartition
            // A waiting append in yesterday's leaf (as one whose transaction began yesterday would be).
            yield* sql`SELECT event_log_ensure_partitions(clock_timestamp() - interval '1 day', interval '0 days')`
            yield* freeLease
            const appended = yield* log.append(events("waiting", 2))
            yield* sql`UPDATE event_log SET occurred_at = occurred_at - interval '1 day' WHERE seq < 0`
            // As a holder's bounds would be while that transaction was open.
            yield* sql`UPDATE event_seq SET unsequenced_from = '-infinity', unsequenced_after = 0`
            yield* sql.unsafe(`ALTER TABLE event_log DETACH PARTITION ${today}`)
            const refused = yield* Effect.flip(log.append(events("refused", 1)))
            assert.strictEqual(refused._tag, "EventLogPartitionMissing", "no partition for now: the append fails")

            const s = yield* start({ holder: "p", standbyInterval: "1 second", pollInterval: "1 second" })
            yield* failsUntilTheLeafIsBack(s, {
              before,
              appended,
              today: today,
              waiting: sql<{ n: number }>`SELECT count(*)::int AS n FROM event_log WHERE seq < 0`,
              waits: 2,
            })
            const [moved] = yield* sql<{ today: boolean }>`
            SELECT bool_and(occurred_at::date = (clock_timestamp() AT TIME ZONE 'UTC')::date) AS today
            FROM event_log WHERE append_id = ${(appended as { appendId: bigint }).appendId}`
            assert.isTrue(moved!.today, "numbered at the batch's time, in today's leaf")
            yield* Fiber.interrupt(s.fiber)
          }).pipe(Effect.provide(TestClock.layer())),
      )

      it.effect(
        "SequencerOverlapNumbersOnce: a holder whose snapshot predates another's batch numbers nothing (its statement fails), so no seq is skipped or given twice",
        () =>
          Effect.gen(function* () {
            const log = yield* EventLog
            const sql = yield* SqlClient.SqlClient
            const before = yield* log.head
            const setHolder = (holder: string) =>
              sql`UPDATE event_sequencer SET holder = ${holder}, expires_at = clock_timestamp() + interval '1 minute'`
            yield* setHolder("first")
            yield* log.append(events("overlap", 3))
            const bounds = { from: undefined, after: 0n }

            // The first holder numbers the append and stays in its transaction.
            const numbered = yield* Deferred.make<void>()
            const release = yield* Deferred.make<void>()
            const first = yield* sql
              .withTransaction(
                Effect.gen(function* () {
                  const batch = yield* SequencerBatchInPlace.run("first", 100, bounds)
                  yield* Deferred.succeed(numbered, undefined)
                  yield* Deferred.await(release)
                  return batch
                }),
              )
              .pipe(Effect.forkChild)
            yield* Deferred.await(numbered)

            // The lease passes on; the second holder's statement sees the append still waiting and
            // queues on the append lock behind the first.
            yield* setHolder("second")
            const second = yield* SequencerBatchInPlace.run("second", 100, bounds).pipe(Effect.exit, Effect.forkChild)
            yield* eventually(
              sql<{ n: number }>`SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted`,
              ([row]) => row?.n === 1,
              { what: "the second batch waiting on the append lock", within: "10 seconds", every: "5 millis" },
            )
            yield* Deferred.succeed(release, undefined)
            const firstBatch = yield* Fiber.join(first)
            assert.deepStrictEqual([firstBatch.firstSeq, firstBatch.lastSeq], [before.seq + 1n, before.seq + 3n])
            const secondExit = yield* Fiber.join(second)
            assert.isTrue(Exit.isFailure(secondExit), "the overlapping batch fails")

            assert.strictEqual((yield* log.head).seq, before.seq + 3n, "the head moved once")
            const rows = yield* sql<{ seq: bigint }>`SELECT seq FROM event_log WHERE seq > ${before.seq} ORDER BY seq`
            assert.deepStrictEqual(
              rows.map((r) => r.seq),
              [1n, 2n, 3n].map((k) => before.seq + k),
            )
          }),
      )
    }

    it.effect(
      "SequencerWokenByCommit: an append wakes the sequencer once its transaction committed (a NOTIFY after the commit), long before its poll would",
      () =>
        Effect.gen(function* () {
          const log = yield* EventLog
          yield* freeLease
          // The first batch after taking the lease finds nothing: the holder then waits on its poll.
          const idle = yield* Deferred.make<void>()
          yield* Layer.build(
            Sequencer.layer({
              placement,
              pollInterval: "1 hour",
              standbyInterval: "20 millis",
              onStep: (step) =>
                step._tag === "Batch" && step.events === 0
                  ? Deferred.succeed(idle, undefined).pipe(Effect.asVoid)
                  : Effect.void,
            }).pipe(Layer.provide(NotificationStream.layer())),
          )
          yield* Deferred.await(idle)
          const { appended } = yield* log.appendAfter(Effect.void, () => events("woken", 2))
          const numbered = yield* log.sequenced(Option.getOrThrow(appended)).pipe(
            Effect.timeoutOrElse({
              duration: "20 seconds",
              orElse: () => Effect.die("not woken: numbered only by the poll"),
            }),
          )
          assert.strictEqual(numbered.lastSeq - numbered.firstSeq, 1n)
        }).pipe(Effect.scoped),
    )
  })
}
