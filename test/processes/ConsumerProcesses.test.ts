import { fileURLToPath } from "node:url"
import { assert, layer } from "@effect/vitest"
import { Effect, Layer, Schema } from "effect"
import { SqlClient } from "effect/sql"
import * as Consumer from "../../src/consumer/Consumer.ts"
import { Jobs } from "../../src/jobs/Jobs.ts"
import { EventLog } from "../../src/log/EventLog.ts"
import { eventually } from "../support/Eventually.ts"
import * as NodeProcess from "../support/NodeProcess.ts"
import * as TestConsumer from "../support/TestConsumer.ts"
import * as TestDatabase from "../support/TestDatabase.ts"

const worker = fileURLToPath(new URL("../support/consumerWorker.ts", import.meta.url))

const Live = Layer.mergeAll(EventLog.layer, Jobs.layer).pipe(Layer.provideMerge(TestDatabase.layer()))

const Report = Schema.fromJsonString(
  Schema.Struct({ counts: Schema.Record(Schema.String, Schema.Number), suppressed: Schema.Number }),
)

const report = (stdout: string) =>
  Schema.decodeUnknownEffect(Report)(stdout.trim().split("\n").at(-1) ?? "").pipe(Effect.orDie)

/** Waits (polling the database) until the consumer's cursor reaches `seq`. */
const awaitCursor = (name: string, seq: bigint) =>
  eventually(TestConsumer.cursor(name), (at) => at >= seq, {
    what: `consumer ${name}'s cursor at ${seq}`,
    within: "90 seconds",
    every: "50 millis",
  })

layer(Live, { excludeTestServices: true })("Consumer worker processes", (it) => {
  it.effect(
    "ConsumersTwoWorkersExactlyOnce: two worker processes, thousands of events, every (event, receiver) has exactly one job",
    () =>
      Effect.gen(function* () {
        const db = yield* TestDatabase.TestDatabase
        const log = yield* EventLog
        const name = "two_workers"
        const receivers = 3
        yield* TestConsumer.register(name)
        const start = yield* TestConsumer.cursor(name)
        const env = { DATABASE_URL: db.url, CONSUMER: name, BATCH_SIZE: "25", RECEIVERS: String(receivers) }
        const a = yield* NodeProcess.start(worker, [], env)
        const b = yield* NodeProcess.start(worker, [], env)
        yield* a.waitFor(/^FIRST /)
        yield* b.waitFor(/^FIRST /)

        // Four producers, 3,000 events in transactions of 1 to 5 events.
        yield* Effect.forEach(
          [0, 1, 2, 3],
          (p) =>
            Effect.gen(function* () {
              for (let sent = 0; sent < 750; ) {
                const n = Math.min(750 - sent, 1 + ((sent + p) % 5))
                yield* log.append(
                  Array.from({ length: n }, (_, i) => ({
                    space: `s${p}`,
                    type: "t",
                    actor: "a",
                    payload: { p, i: sent + i },
                  })),
                )
                sent += n
              }
            }),
          { concurrency: 4, discard: true },
        )
        const head = (yield* log.head).seq
        assert.strictEqual(head - start, 3000n)
        yield* awaitCursor(name, head)

        a.child.kill("SIGTERM")
        b.child.kill("SIGTERM")
        const [ra, rb] = [yield* a.exited, yield* b.exited]
        assert.strictEqual(ra.code, 0, ra.stderr)
        assert.strictEqual(rb.code, 0, rb.stderr)
        for (const r of [yield* report(ra.stdout), yield* report(rb.stdout)]) {
          assert.isAtLeast(r.counts.Locked ?? 0, 1, "each process found the cursor locked at least once")
          assert.isAtLeast(r.counts.Processed ?? 0, 1, "each process processed rounds")
          assert.strictEqual(r.counts.Failed ?? 0, 0)
          assert.strictEqual(r.suppressed, 0, "the unique key never had to catch a duplicate")
        }
        yield* TestConsumer.assertExactlyOnce(name, start, head, receivers)
      }).pipe(Effect.scoped),
    120_000,
  )

  it.effect(
    "ConsumerCrashMidRoundNoDuplicates: SIGKILL of a worker process mid-round; the next round creates the batch once",
    () =>
      Effect.gen(function* () {
        const db = yield* TestDatabase.TestDatabase
        const sql = yield* SqlClient.SqlClient
        const log = yield* EventLog
        const name = "sigkilled"
        yield* TestConsumer.register(name)
        const start = yield* TestConsumer.cursor(name)
        for (let i = 0; i < 10; i++) {
          yield* log.append(Array.from({ length: 5 }, () => ({ space: "s", type: "t", actor: "a", payload: { i } })))
        }
        const head = (yield* log.head).seq
        const victim = yield* NodeProcess.start(worker, [], {
          DATABASE_URL: db.url,
          CONSUMER: name,
          BATCH_SIZE: "100",
          RECEIVERS: "2",
          BLOCK_IN_FANOUT: "1",
        })
        // Its round holds the cursor row and is inside the fan-out.
        yield* victim.waitFor(/^IN_FANOUT /)
        const locked = yield* Consumer.makeRound({
          name,
          batchSize: 100,
          onLoss: () => Effect.void,
          fanOut: (events) => Effect.succeed(TestConsumer.fanOutJobs(events, 2)),
        })
        assert.strictEqual((yield* locked)._tag, "Locked", "the victim's round is in flight")
        victim.child.kill("SIGKILL")
        const killed = yield* victim.exited
        assert.strictEqual(killed.signal, "SIGKILL")

        // PostgreSQL rolls back the dead client's transaction once it sees the socket close.
        const outcome = yield* eventually(locked, (o) => o._tag !== "Locked", {
          what: "a round once the killed worker's transaction is rolled back",
          within: "30 seconds",
          every: "20 millis",
        })
        assert.strictEqual(outcome._tag, "Processed")
        assert.strictEqual(yield* TestConsumer.cursor(name), head)
        yield* TestConsumer.assertExactlyOnce(name, start, head, 2)
        const [jobs] = yield* sql<{
          n: number
        }>`SELECT count(*)::int AS n FROM jobs WHERE unique_key LIKE ${`${name}:%`}`
        assert.strictEqual(jobs!.n, 100)
      }).pipe(Effect.scoped),
    60_000,
  )
})
