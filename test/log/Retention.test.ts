import { assert, layer } from "@effect/vitest"
import { Deferred, Duration, Effect, Fiber, Layer } from "effect"
import { SqlClient } from "effect/sql"
import { TestClock } from "effect/testing"
import * as Consumer from "../../src/consumer/Consumer.ts"
import type { LostRange } from "../../src/consumer/ConsumerRound.ts"
import { Jobs } from "../../src/jobs/Jobs.ts"
import { EventLog } from "../../src/log/EventLog.ts"
import * as Retention from "../../src/log/Retention.ts"
import { eventually } from "../support/Eventually.ts"
import { appendAt, dayMillis, days } from "../support/OldEvents.ts"
import * as TestConsumer from "../support/TestConsumer.ts"
import * as TestDatabase from "../support/TestDatabase.ts"

const Live = Layer.merge(EventLog.layer, Jobs.layer).pipe(Layer.provideMerge(TestDatabase.layer()))

const week = Duration.days(7)

const dayName = (t: number) => `event_log_${new Date(t).toISOString().slice(0, 10).replaceAll("-", "")}`

/** The log's day tables: attached (a partition) or not. */
const tables = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  return yield* sql<{ name: string; attached: boolean; pending: boolean }>`
    SELECT c.relname AS name, i.inhrelid IS NOT NULL AS attached, coalesce(i.inhdetachpending, false) AS pending
    FROM pg_class AS c LEFT JOIN pg_inherits AS i ON i.inhrelid = c.oid
    WHERE c.relkind IN ('r', 'p') AND c.relname ~ '^event_log_[0-9]{8}$' ORDER BY c.relname`
})

const seqsIn = (seqs: ReadonlyArray<bigint>) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<{ seq: bigint }>`SELECT seq FROM event_log WHERE seq = ANY (${seqs.map(String)}::bigint[]) ORDER BY seq`,
      (rows) => rows.map((r) => r.seq),
    ),
  )

/** Days from `from` (a time) through `to`, by the start of each UTC day. */
const dayStarts = (from: number, to: number) => {
  const first = Math.floor(from / dayMillis) * dayMillis
  return Array.from({ length: Math.floor((to - first) / dayMillis) + 1 }, (_, i) => first + i * dayMillis)
}

layer(Live, { excludeTestServices: true })("Retention", (it) => {
  it.effect(
    "RetentionDetachesOldPartitionsOnly: day partitions whose day ended before now − 7 d are detached and dropped, newer ones and their events stay, appends go on, and a worker back after 10 simulated days creates the partitions it missed",
    () =>
      Effect.gen(function* () {
        const now = Date.now()
        yield* TestClock.setTime(now)
        yield* days(now - 12 * dayMillis, 12)
        const old = yield* appendAt([now - 11 * dayMillis, now - 9 * dayMillis])
        const kept = yield* appendAt([now - 6 * dayMillis, now - dayMillis])
        const run = yield* Retention.run({ retention: week, dropPause: Duration.zero })

        const cutoff = now - Duration.toMillis(week)
        const expired = dayStarts(now - 12 * dayMillis, now)
          .filter((d) => d + dayMillis <= cutoff)
          .map(dayName)
        assert.deepStrictEqual(run.detached, expired, JSON.stringify(run))
        assert.deepStrictEqual(run.dropped, expired)
        assert.deepStrictEqual(run.skipped, [])
        const left = yield* tables
        assert.isTrue(left.every((t) => t.attached && !expired.includes(t.name)))
        // Days are split by hour (migration 0017): a dropped day left no hour behind, a kept one has all 24.
        const hours = yield* (yield* SqlClient.SqlClient)<{ day: string; n: number }>`
          SELECT substr(relname, 1, 18) AS day, count(*)::int AS n FROM pg_class
          WHERE relkind = 'r' AND relname ~ '^event_log_[0-9]{8}_h[0-9]{2}$' GROUP BY 1`
        assert.isTrue(
          hours.every((h) => !expired.includes(h.day) && h.n === 24),
          JSON.stringify(hours),
        )
        assert.include(
          hours.map((h) => h.day),
          dayName(cutoff),
          "the kept days are split by hour",
        )
        assert.include(
          hours.map((h) => h.day),
          dayName(now + 14 * dayMillis),
          "the days the migrations created ahead are split by hour",
        )
        assert.include(
          left.map((t) => t.name),
          dayName(cutoff),
          "the day the window starts in is kept",
        )
        assert.deepStrictEqual(yield* seqsIn([...old, ...kept]), kept)
        yield* (yield* EventLog).append([{ space: "s", type: "t", actor: "a", payload: {} }])
        assert.include(
          left.map((t) => t.name),
          dayName(now + 14 * dayMillis),
          "14 days ahead exist",
        )

        // Back after 10 days: everything up to 14 days past the new now, and nothing older than its window.
        const later = now + 10 * dayMillis
        yield* TestClock.setTime(later)
        const back = yield* Retention.run({ retention: week, dropPause: Duration.zero })
        assert.strictEqual(back.created, 10)
        const after = (yield* tables).map((t) => t.name)
        assert.include(after, dayName(later + 14 * dayMillis))
        assert.notInclude(after, dayName(later - Duration.toMillis(week) - dayMillis))
        assert.isEmpty(yield* seqsIn(kept), "their days are past the window now")
      }).pipe(Effect.provide(TestClock.layer())),
  )

  it.effect(
    "RetentionFromTwoWorkers: two runs at once, five times over, detach and drop every old partition once between them, without failing or skipping one (alone, each refuses the other's detaches)",
    () =>
      Effect.gen(function* () {
        const now = Date.now()
        for (let round = 0; round < 5; round++) {
          const first = now - (30 + 6 * round) * dayMillis
          yield* days(first, 4)
          yield* appendAt([first])
          const [a, b] = yield* Effect.all(
            [
              Retention.run({ retention: week, dropPause: Duration.zero }),
              Retention.run({ retention: week, dropPause: Duration.zero }),
            ],
            { concurrency: 2 },
          )
          const runs = JSON.stringify({ round, a, b })
          assert.deepStrictEqual([...a.skipped, ...b.skipped], [], runs)
          const dropped = [...a.dropped, ...b.dropped].sort()
          assert.deepStrictEqual(dropped, [...new Set(dropped)], `none dropped twice: ${runs}`)
          assert.include(dropped, dayName(first), runs)
          assert.isFalse(
            (yield* tables).some((t) => t.name <= dayName(now - 25 * dayMillis)),
            runs,
          )
        }
      }),
  )

  it.effect(
    "RetentionLeaseLapses: a run finds the lease another worker holds and does nothing; once that lease has lapsed (its worker died) the next run takes it and does the work",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const now = Date.now()
        yield* days(now - 70 * dayMillis, 1)
        yield* sql`UPDATE retention_lease SET holder = 'dead worker', expires_at = clock_timestamp() + interval '1 hour'`
        const held = yield* Retention.run({ retention: week, dropPause: Duration.zero })
        assert.isTrue(held.busy)
        assert.deepStrictEqual(held.dropped, [])
        assert.include(
          (yield* tables).map((t) => t.name),
          dayName(now - 70 * dayMillis),
        )

        yield* sql`UPDATE retention_lease SET expires_at = clock_timestamp() - interval '1 second'`
        const lapsed = yield* Retention.run({ retention: week, dropPause: Duration.zero })
        assert.isFalse(lapsed.busy)
        assert.include(lapsed.dropped, dayName(now - 70 * dayMillis))
        const [lease] = yield* sql<{ free: boolean }>`SELECT expires_at = '-infinity' AS free FROM retention_lease`
        assert.isTrue(lease?.free, "given up when the run ended")
      }),
  )

  it.effect(
    "RetentionFinalizesPendingDetach: a detach interrupted while a reader held its partition leaves it pending; the next run finishes the detach and drops it",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const other = yield* TestDatabase.otherClient
        const now = Date.now()
        yield* days(now - 40 * dayMillis, 1)
        const [seq] = yield* appendAt([now - 40 * dayMillis])
        const victim = dayName(now - 40 * dayMillis)

        // A reader holding a snapshot that sees the partition, and a detach waiting for it.
        const reader = yield* Effect.forkChild(
          other.withTransaction(
            Effect.gen(function* () {
              yield* other`SELECT count(*) FROM event_log WHERE seq = ${seq!}`
              yield* Effect.never
            }),
          ),
        )
        yield* eventually(
          other<{
            n: number
          }>`SELECT count(*)::int AS n FROM pg_stat_activity WHERE state = 'idle in transaction' AND datname = current_database()`,
          (rows) => rows[0]!.n > 0,
          { what: "the reader's open transaction", within: "10 seconds", every: "20 millis" },
        )
        const detach = yield* Effect.forkChild(
          Effect.ignore(sql.unsafe(`ALTER TABLE event_log DETACH PARTITION ${victim} CONCURRENTLY`)),
        )
        yield* eventually(
          other<{ pid: number }>`
            SELECT pid FROM pg_stat_activity WHERE query LIKE 'ALTER TABLE event_log DETACH%' AND wait_event_type = 'Lock'`,
          (rows) => rows.length > 0,
          { what: "the detach waiting for the reader", within: "10 seconds", every: "20 millis" },
        )
        yield* other`
          SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE query LIKE 'ALTER TABLE event_log DETACH%'`
        yield* Fiber.join(detach)
        yield* Fiber.interrupt(reader)
        assert.deepStrictEqual(
          (yield* tables).filter((t) => t.name === victim),
          [{ name: victim, attached: true, pending: true }],
        )

        const run = yield* Retention.run({ retention: week, dropPause: Duration.zero })
        assert.include(run.finalized, victim)
        assert.include(run.dropped, victim)
        assert.isFalse((yield* tables).some((t) => t.name === victim))
      }),
  )

  it.effect(
    "RetentionDuringRoundIsSafe: a detach waits for a reader that still sees the partition (its rows stay readable to it); a round meanwhile either reads the events or reports them lost, never fails or skips them silently; once the detach is done the range is reported lost",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const other = yield* TestDatabase.otherClient
        const now = Date.now()
        yield* days(now - 50 * dayMillis, 1)
        const name = "during_detach"
        const late = "after_detach"
        yield* TestConsumer.register(name)
        yield* TestConsumer.register(late)
        const old = yield* appendAt([now - 50 * dayMillis, now - 50 * dayMillis + 1000])
        const [fresh] = yield* appendAt([now])

        // A reader in a snapshot that sees the old day.
        const reading = yield* Deferred.make<number>()
        const release = yield* Deferred.make<void>()
        const reader = yield* Effect.forkChild(
          other.withTransaction(
            Effect.gen(function* () {
              yield* other`SET TRANSACTION ISOLATION LEVEL REPEATABLE READ`
              const seen = yield* other<{ n: number }>`SELECT count(*)::int AS n FROM event_log WHERE seq <= ${old[1]!}`
              yield* Deferred.succeed(reading, seen[0]!.n)
              yield* Deferred.await(release)
              return (yield* other<{ n: number }>`SELECT count(*)::int AS n FROM event_log WHERE seq <= ${old[1]!}`)[0]!
                .n
            }),
          ),
        )
        const before = yield* Deferred.await(reading)
        const retention = yield* Effect.forkChild(Retention.run({ retention: week, dropPause: Duration.zero }))
        yield* eventually(
          other<{ n: number }>`
            SELECT count(*)::int AS n FROM pg_stat_activity WHERE query LIKE 'ALTER TABLE event_log DETACH%' AND wait_event_type IS NOT NULL`,
          (rows) => rows[0]!.n > 0,
          { what: "the detach waiting for the reader", within: "10 seconds", every: "20 millis" },
        )

        const lost: Array<LostRange> = []
        const round = (consumer: string) =>
          Effect.flatMap(
            Consumer.makeRound({
              name: consumer,
              batchSize: 100,
              onLoss: (range) => Effect.sync(() => lost.push(range)),
              fanOut: (events) => Effect.succeed(TestConsumer.fanOutJobs(events, 1)),
            }),
            (r) => r,
          )
        const during = yield* round(name)
        assert.strictEqual(during._tag, "Processed")
        const jobSeqs = yield* sql<{ seq: string }>`
          SELECT args ->> 'seq' AS seq FROM jobs WHERE unique_key LIKE ${`${name}:%`} ORDER BY 1`
        const covered = new Set([
          ...jobSeqs.map((j) => BigInt(j.seq)),
          ...lost.flatMap((r) =>
            Array.from({ length: Number(r.lastSeq - r.firstSeq + 1n) }, (_, k) => r.firstSeq + BigInt(k)),
          ),
        ])
        assert.deepStrictEqual(
          [...covered].sort((a, b) => (a < b ? -1 : 1)),
          [...old, fresh!],
          "every event read or reported lost",
        )

        yield* Deferred.succeed(release, undefined)
        assert.strictEqual(yield* Fiber.join(reader), before, "the reader kept its rows")
        assert.isAtLeast(before, 2)
        const done = yield* Fiber.join(retention)
        assert.include(done.dropped, dayName(now - 50 * dayMillis))

        lost.length = 0
        const after = yield* round(late)
        assert.strictEqual(after._tag, "Processed")
        assert.deepStrictEqual(lost, [{ firstSeq: old[0]!, lastSeq: old[1]! }])
      }),
  )
})
