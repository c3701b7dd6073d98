/**
 * A round under a live `LogRewind` guard, on a log made to go back as a promoted asynchronous
 * standby's does: the tail the round read is deleted and the counter set back, then (in one case)
 * new appends take the lost seqs. Both the one-statement and the transactional round write nothing
 * when they find it, hand the rewind to `recover`, and round again afterwards.
 */
import { assert, layer } from "@effect/vitest"
import { Effect, Layer, Ref } from "effect"
import { SqlClient } from "effect/sql"
import * as Consumer from "../../src/consumer/Consumer.ts"
import * as StatementRound from "../../src/consumer/StatementRound.ts"
import { Jobs } from "../../src/jobs/Jobs.ts"
import type { Event } from "../../src/log/Event.ts"
import { EventLog } from "../../src/log/EventLog.ts"
import * as LogRewind from "../../src/log/LogRewind.ts"
import * as TestConsumer from "../support/TestConsumer.ts"
import * as TestDatabase from "../support/TestDatabase.ts"

const receivers = 2

const append = (n: number) =>
  Effect.gen(function* () {
    const log = yield* EventLog
    yield* log.append(Array.from({ length: n }, (_, j) => ({ space: "s", type: "t", actor: "u", payload: { j } })))
  })

/**
 * What a standby that stopped receiving when `name`'s cursor and the head were at `seq` has: the
 * events after it, their jobs and the cursor's move gone, the counter back.
 */
const goBackTo = (name: string, seq: bigint) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.all([
      sql`DELETE FROM event_log WHERE seq > ${seq}`,
      sql`DELETE FROM jobs WHERE (args->>'seq')::bigint > ${seq}`,
      sql`UPDATE event_consumer_cursors SET last_seq = ${seq} WHERE name = ${name}`,
      sql`UPDATE event_seq SET value = ${seq}, last_at = (SELECT occurred_at FROM event_log WHERE seq = ${seq})`,
    ]),
  )

const jobsAbove = (seq: bigint) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql<{ n: number }>`SELECT count(*)::int AS n FROM jobs WHERE (args->>'seq')::bigint > ${seq}`,
  ).pipe(Effect.map(([r]) => r!.n))

/** The test consumer's options: its fan-out in TypeScript (the transactional round). */
const options = (name: string) => ({
  name,
  batchSize: 100,
  onLoss: () => Effect.void,
  fanOut: (events: ReadonlyArray<Event>) => Effect.succeed(TestConsumer.fanOutJobs(events, receivers)),
})

const rounds = {
  statement: (name: string) =>
    Consumer.makeRound({
      ...options(name),
      oneStatement: (round) =>
        StatementRound.make({ ...round, fanOut: { ctes: (sql) => TestConsumer.wantedCte(sql, receivers) } }),
    }),
  transactional: (name: string) => Consumer.makeRound(options(name)),
}

const Live = Layer.mergeAll(EventLog.layer, Jobs.layer).pipe(Layer.provideMerge(TestDatabase.layer()))

layer(Live, { excludeTestServices: true })("LogRewind in rounds", (it) => {
  for (const [path, makeRound] of Object.entries(rounds)) {
    for (const overtaken of [false, true]) {
      it.effect(
        `RoundFindsRewind (${path} round, ${overtaken ? "new appends took the lost seqs" : "head below what it read"}): nothing written, recover called with what it read, then the round goes on`,
        () =>
          Effect.gen(function* () {
            const name = `rewind_${path}_${overtaken}`
            yield* TestConsumer.register(name)
            const start = yield* TestConsumer.cursor(name)
            const recovered = yield* Ref.make<ReadonlyArray<LogRewind.LogRewound>>([])
            const sql = yield* SqlClient.SqlClient
            const guard = LogRewind.make((rewound) =>
              Effect.gen(function* () {
                // The round that found it wrote nothing: no job past the kept head, the cursor where it was.
                assert.strictEqual(yield* jobsAbove(start + 3n), 0)
                assert.strictEqual(yield* TestConsumer.cursor(name), start + 3n)
                yield* Ref.update(recovered, (r) => [...r, rewound])
              }).pipe(Effect.provideService(SqlClient.SqlClient, sql)),
            )
            const round = yield* makeRound(name).pipe(Effect.provideService(LogRewind.LogRewind, guard))

            yield* append(3)
            assert.strictEqual((yield* round)._tag, "Processed")
            yield* append(3)
            assert.strictEqual((yield* round)._tag, "Processed")
            assert.strictEqual(guard.floor()?.seq, start + 6n)

            yield* goBackTo(name, start + 3n)
            if (overtaken) yield* append(5)
            const outcome = yield* round
            const [rewound] = yield* Ref.get(recovered)
            assert.deepStrictEqual(
              { epoch: rewound?.epoch, seen: rewound?.seen, head: rewound?.head },
              { epoch: 1, seen: start + 6n, head: start + (overtaken ? 8n : 3n) },
            )
            assert.match(rewound!.message, /bothy restore finalize/)
            // Recovered (this test's recover changes nothing): the guard starts again from the head.
            assert.strictEqual(outcome._tag, overtaken ? "Processed" : "CaughtUp")
            assert.strictEqual(guard.floor()?.seq, start + (overtaken ? 8n : 3n))
          }),
      )
    }
  }

  it.effect(
    "RoundWithoutGuard: without the worker's layer the guard is off: the round fans out the events that took the lost seqs",
    () =>
      Effect.gen(function* () {
        const name = "rewind_off"
        yield* TestConsumer.register(name)
        const start = yield* TestConsumer.cursor(name)
        const round = yield* rounds.statement(name)
        yield* append(6)
        yield* round
        yield* goBackTo(name, start + 3n)
        yield* append(5)
        assert.strictEqual((yield* round)._tag, "Processed")
        assert.strictEqual(yield* jobsAbove(start + 6n), 2 * receivers)
        assert.isUndefined((yield* LogRewind.LogRewind).floor())
      }),
  )
})
