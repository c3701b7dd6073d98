import { PgClient } from "@effect/sql-pg"
import { assert, layer } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber, Layer, Option, Queue, Random, Ref, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { InvalidEvent, maxPayloadBytes, type NewEvent } from "../../src/log/Event.ts"
import { EventLog, EventLogPartitionMissing } from "../../src/log/EventLog.ts"
import * as LogModes from "../support/LogModes.ts"
import * as TestDatabase from "../support/TestDatabase.ts"

const event = (payload: unknown = { n: 1 }): NewEvent =>
  ({ space: "space-1", type: "item.created", actor: "user-1", payload }) as NewEvent

class Boom extends Schema.TaggedError<Boom>()("Boom", {}) {}

const logContents = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  return yield* sql<{ seq: bigint; id: string }>`SELECT seq, payload->>'id' AS id FROM event_log ORDER BY seq`
})

for (const mode of LogModes.modes) {
  const Live = LogModes.eventLog(mode).pipe(Layer.provideMerge(TestDatabase.layer({ maxConnections: 24 })))
  layer(Live, { excludeTestServices: true })(`EventLog (${mode})`, (it) => {
    it.effect(
      "EventLogGaplessUnderConcurrentRollbacks: 16 producers committing slowly and out of transaction-id order, a third of them failing in four ways, leave exactly 1..N",
      () =>
        Effect.gen(function* () {
          const log = yield* EventLog
          const sql = yield* SqlClient.SqlClient
          const other = yield* TestDatabase.otherClient
          const producers = 16
          const perProducer = 200
          const committed = yield* Ref.make(new Set<string>())
          const fates = yield* Ref.make<Record<string, number>>({})
          const done = yield* Deferred.make<void>()

          // A reader that polls like a consumer: every batch it sees must continue its cursor exactly.
          const reader = Effect.gen(function* () {
            let cursor = 0n
            let reads = 0
            while (!(yield* Deferred.isDone(done))) {
              const rows = yield* other<{ seq: bigint }>`SELECT seq FROM event_log WHERE seq > ${cursor} ORDER BY seq`
              for (const { seq } of rows) {
                assert.strictEqual(seq, cursor + 1n, `reader saw seq ${seq} right after ${cursor}`)
                cursor = seq
              }
              reads++
            }
            return reads
          })
          const readerFiber = yield* Effect.forkChild(reader)

          const one = (producer: number, i: number) =>
            Effect.gen(function* () {
              const id = `${producer}-${i}`
              const roll = yield* Random.nextIntBetween(0, 12)
              const fate = roll >= 4 ? "commit" : (["fail", "die", "interrupt", "terminate"] as const)[roll]!
              yield* Ref.update(fates, (f) => ({ ...f, [fate]: (f[fate] ?? 0) + 1 }))
              const delay = yield* Random.nextIntBetween(0, 3)
              const slowCommit = yield* Random.nextIntBetween(0, 3)
              const appended = yield* Deferred.make<void>()
              const transaction = sql.withTransaction(
                Effect.gen(function* () {
                  // The transaction id is taken first; the random waits around the append then
                  // make commits come in another order than transaction ids (and, in post_commit
                  // mode, than append ids).
                  yield* sql`SELECT pg_current_xact_id()::text`
                  yield* Effect.sleep(delay)
                  yield* log.append([event({ id, producer, i })])
                  switch (fate) {
                    case "fail":
                      return yield* new Boom()
                    case "die":
                      return yield* Effect.die("defect inside the transaction")
                    case "interrupt":
                      yield* Deferred.succeed(appended, undefined)
                      return yield* Effect.never
                    case "terminate": {
                      const [row] = yield* sql<{ pid: number }>`SELECT pg_backend_pid() AS pid`
                      yield* other`SELECT pg_terminate_backend(${row!.pid})`
                      yield* sql`SELECT 1`
                      return
                    }
                    case "commit":
                      yield* Effect.sleep(slowCommit)
                      return
                  }
                }),
              )
              const exit =
                fate === "interrupt"
                  ? yield* Effect.gen(function* () {
                      const fiber = yield* Effect.forkChild(transaction)
                      yield* Deferred.await(appended)
                      yield* Fiber.interrupt(fiber)
                      return yield* Fiber.await(fiber)
                    })
                  : yield* Effect.exit(transaction)
              // Whatever the fate, the truth is whether the transaction reported success.
              if (Exit.isSuccess(exit)) yield* Ref.update(committed, (s) => new Set(s).add(id))
              else assert.notStrictEqual(fate, "commit", `a plain commit failed: ${String(exit.cause)}`)
            })

          yield* Effect.forEach(
            Array.from({ length: producers }, (_, p) => p),
            (p) =>
              Effect.forEach(
                Array.from({ length: perProducer }, (_, i) => i),
                (i) => one(p, i),
                { discard: true },
              ),
            { concurrency: producers, discard: true },
          )
          yield* LogModes.settled
          yield* Deferred.succeed(done, undefined)
          const reads = yield* Fiber.join(readerFiber)

          const rows = yield* logContents
          const ids = yield* Ref.get(committed)
          const seen = yield* Ref.get(fates)
          assert.deepStrictEqual(
            rows.map((r) => r.seq),
            rows.map((_, i) => BigInt(i + 1)),
            "seqs are exactly 1..N",
          )
          assert.deepStrictEqual(new Set(rows.map((r) => r.id)), ids, "the log holds exactly the committed appends")
          assert.strictEqual((yield* log.head).seq, BigInt(rows.length))
          const failed = producers * perProducer - ids.size
          assert.isAbove(failed, producers * perProducer * 0.25, "about a third of the transactions failed")
          for (const fate of ["fail", "die", "interrupt", "terminate"]) assert.isAbove(seen[fate] ?? 0, 50, fate)
          assert.isAbove(reads, 10, "the reader polled throughout")
        }),
      120_000,
    )

    it.effect(
      "EventLogNotifyOnlyAfterCommit: a committed append wakes a listener (once numbered), a rolled-back one never",
      () =>
        Effect.gen(function* () {
          const log = yield* EventLog
          const sql = yield* SqlClient.SqlClient
          const pg = yield* PgClient.PgClient
          const other = yield* TestDatabase.otherClient
          const notifications = yield* pg.listen("event_log")

          yield* sql.withTransaction(Effect.andThen(log.append([event()]), new Boom())).pipe(Effect.flip)
          const committed = yield* sql.withTransaction(
            Effect.gen(function* () {
              const [tx] = yield* sql<{ pid: number }>`SELECT pg_backend_pid() AS pid`
              const appended = yield* log.append([event()])
              return { pid: tx!.pid, appended }
            }),
          )
          yield* log.sequenced(committed.appended)
          // A sentinel from another backend: delivery follows commit order, so once it arrives every
          // notification sent before it has arrived too.
          const [sentinel] = yield* other<{ pid: number }>`SELECT pg_backend_pid() AS pid`
          yield* other`SELECT pg_notify('event_log', 'sentinel')`

          const received: Array<{ processId: number; payload: string }> = []
          while (received.at(-1)?.payload !== "sentinel") {
            received.push(yield* Queue.take(notifications).pipe(Effect.timeout("10 seconds")))
          }
          assert.strictEqual(received.at(-1)!.processId, sentinel!.pid)
          const fromAppends = received.slice(0, -1)
          assert.strictEqual(fromAppends.length, 1, "one notification: the committed append's")
          // In post_commit mode the sequencer's batch notifies, never the producer (whose NOTIFY would
          // serialize commits); its batch may run on the pooled connection the producer's transaction
          // used, so the backend alone cannot tell the two apart there.
          if (mode === "counter") assert.strictEqual(fromAppends[0]!.processId, committed.pid)
          assert.strictEqual(fromAppends[0]!.payload, "", "NOTIFY is a wake-up and carries no data")
        }),
    )

    it.effect("EventLogRejectsBadInput: each bad input is a typed error and the log is unchanged", () =>
      Effect.gen(function* () {
        const log = yield* EventLog
        const before = yield* log.head
        const contents = yield* logContents
        const cyclic: Record<string, unknown> = {}
        cyclic.self = cyclic
        const cases: ReadonlyArray<readonly [string, ReadonlyArray<unknown>, InvalidEvent["reason"]]> = [
          ["empty batch", [], "EmptyBatch"],
          ["empty type", [{ ...event(), type: "" }], "Malformed"],
          ["type with spaces", [{ ...event(), type: "item created" }], "Malformed"],
          ["empty space", [{ ...event(), space: "" }], "Malformed"],
          ["missing actor", [{ space: "s", type: "t", payload: {} }], "Malformed"],
          ["overlong type", [{ ...event(), type: "t".repeat(201) }], "Malformed"],
          ["oversized payload", [event({ blob: "x".repeat(maxPayloadBytes) })], "PayloadTooLarge"],
          ["bigint", [event({ n: 1n })], "Malformed"],
          ["NaN", [event({ n: Number.NaN })], "Malformed"],
          ["Infinity", [event([Number.POSITIVE_INFINITY])], "Malformed"],
          ["undefined", [event({ n: undefined })], "Malformed"],
          ["function", [event({ f: () => 1 })], "Malformed"],
          ["Date", [event({ at: new Date() })], "Malformed"],
          ["cycle", [event(cyclic)], "Malformed"],
          ["NUL in a string", [event({ s: "a\u0000b" })], "PayloadNotStorable"],
          ["NUL in a key", [event({ "k\u0000": 1 })], "PayloadNotStorable"],
          ["lone surrogate", [event({ s: "\ud800x" })], "PayloadNotStorable"],
          ["one bad event among good ones", [event(), event(), { ...event(), type: "" }], "Malformed"],
        ]
        for (const [name, batch, reason] of cases) {
          const error = yield* log.append(batch as ReadonlyArray<NewEvent>).pipe(Effect.flip)
          assert.instanceOf(error, InvalidEvent, name)
          assert.strictEqual((error as InvalidEvent).reason, reason, name)
        }
        // The last case names the offending event, not the batch.
        const mixed = yield* log.append([event(), { ...event(), type: "" }]).pipe(Effect.flip)
        assert.strictEqual((mixed as InvalidEvent).index, 1)
        assert.deepStrictEqual(yield* log.head, before)
        assert.deepStrictEqual(yield* logContents, contents)

        // Escaped backslashes that only look like a NUL escape are fine, and round-trip.
        const tricky = { s: "\\u0000 is text", pair: "😀" }
        const ok = yield* LogModes.appendSequenced([event(tricky)])
        const [stored] = yield* log.read(ok.firstSeq - 1n, 1)
        assert.deepStrictEqual(stored!.payload, tricky)
      }),
    )

    it.effect("reads in seq order from a cursor, with the epoch and the caller's trace", () =>
      Effect.gen(function* () {
        const log = yield* EventLog
        const start = (yield* log.head).seq
        const first = yield* LogModes.appendSequenced([event({ k: 1 }), event({ k: 2 }), event({ k: 3 })])
        const second = yield* LogModes.appendSequenced([event({ k: 4 })]).pipe(Effect.withSpan("producer"))
        assert.strictEqual(first.firstSeq, start + 1n)
        assert.strictEqual(second.firstSeq, first.lastSeq + 1n)
        assert.isTrue(first.occurredAt.getTime() <= second.occurredAt.getTime())
        const page = yield* log.read(start + 1n, 2)
        assert.deepStrictEqual(
          page.map((e) => [e.seq, e.payload]),
          [
            [start + 2n, { k: 2 }],
            [start + 3n, { k: 3 }],
          ],
        )
        const [last] = yield* log.read(first.lastSeq, 10)
        assert.strictEqual(last!.epoch, 1)
        assert.match(last!.traceParent ?? "", /^00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]$/)
        assert.deepStrictEqual(yield* log.head, { seq: second.lastSeq, epoch: 1 })
      }),
    )

    it.effect("appendAfter commits the producer's work and the append together, or neither", () =>
      Effect.gen(function* () {
        const log = yield* EventLog
        const sql = yield* SqlClient.SqlClient
        yield* sql`CREATE TABLE IF NOT EXISTS producer_rows (id text PRIMARY KEY)`
        const before = (yield* log.head).seq
        const ok = yield* log.appendAfter(sql`INSERT INTO producer_rows VALUES ('a')`.pipe(Effect.as("a")), (id) => [
          event({ id }),
        ])
        assert.strictEqual(ok.value, "a")
        assert.strictEqual((yield* log.sequenced(Option.getOrThrow(ok.appended))).lastSeq, before + 1n)
        // Bad events roll back the producer's own work too.
        const bad = yield* log
          .appendAfter(sql`INSERT INTO producer_rows VALUES ('b')`, () => [{ ...event(), type: "" }])
          .pipe(Effect.flip)
        assert.instanceOf(bad, InvalidEvent)
        const rows = yield* sql<{ id: string }>`SELECT id FROM producer_rows ORDER BY id`
        assert.deepStrictEqual(
          rows.map((r) => r.id),
          ["a"],
        )
        assert.strictEqual((yield* log.head).seq, before + 1n)
        // No events: the work commits and nothing is appended.
        const none = yield* log.appendAfter(Effect.succeed(1), () => [])
        assert.isTrue(Option.isNone(none.appended))
      }),
    )

    it.effect.skipIf(mode !== "counter")(
      "an append with no partition for its day fails loudly with EventLogPartitionMissing",
      () =>
        Effect.gen(function* () {
          const log = yield* EventLog
          const sql = yield* SqlClient.SqlClient
          const [today] = yield* sql<{ name: string }>`
        SELECT 'event_log_' || to_char((clock_timestamp() AT TIME ZONE 'UTC')::date, 'YYYYMMDD') AS name`
          yield* sql.unsafe(`ALTER TABLE event_log DETACH PARTITION ${today!.name}`)
          const before = yield* log.head
          const error = yield* log.append([event()]).pipe(Effect.flip)
          assert.instanceOf(error, EventLogPartitionMissing)
          assert.deepStrictEqual(yield* log.head, before, "the counter is rolled back with the insert")
          yield* sql.unsafe(`DROP TABLE ${today!.name}`)
          const [created] = yield* sql<{ n: number }>`SELECT event_log_ensure_partitions(interval '1 day') AS n`
          assert.strictEqual(created!.n, 1)
          yield* log.append([event()])
        }),
    )
  })
}
