import { assert, layer } from "@effect/vitest"
import { Effect, Exit } from "effect"
import { SqlClient } from "effect/sql"
import * as JobLease from "../../src/jobs/JobLease.ts"
import { Jobs } from "../../src/jobs/Jobs.ts"
import * as RestoreFinalize from "../../src/ops/RestoreFinalize.ts"
import * as PendingDetach from "../support/PendingDetach.ts"
import * as TestDatabase from "../support/TestDatabase.ts"
import * as TestWebhooks from "../support/TestWebhooks.ts"

const state = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const [counter] = yield* sql<{ head: bigint; epoch: number }>`SELECT value AS head, epoch FROM event_seq`
  const cursors = yield* sql<{ name: string; lastSeq: bigint }>`
    SELECT name, last_seq AS "lastSeq" FROM event_consumer_cursors ORDER BY name`
  const jobs = yield* sql<{ id: bigint; kind: string; state: string }>`SELECT id, kind, state FROM jobs ORDER BY id`
  const deliveries = yield* sql<{
    id: bigint
    eventSeq: bigint
    state: string
    sequence: bigint | null
    epoch: number
  }>`
    SELECT id, event_seq AS "eventSeq", state, sequence, epoch FROM webhook_deliveries ORDER BY id`
  return { head: counter!.head, epoch: counter!.epoch, cursors, jobs, deliveries }
})

/** The partition created furthest ahead (empty: its detach loses nothing). */
const lastPartition = Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => sql<{ name: string }>`
    SELECT c.relname AS name FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid
    WHERE i.inhparent = 'event_log'::regclass ORDER BY c.relname DESC LIMIT 1`,
).pipe(Effect.map(([row]) => row!.name))

layer(TestWebhooks.layer(), { excludeTestServices: true })("Restore finalize", (it) => {
  it.effect(
    "RestoreFinalizeSetsCursorsToHead: every cursor at the head, a new epoch, a pending detach finalized, pending work kept with its ids; a second run creates no duplicate work",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        // The state a backup might hold: a subscription with pending deliveries (one of them sent
        // once, so numbered), the `webhooks` cursor behind the head (events it has not read), the
        // `push` cursor further behind, a job of another kind, and a detach interrupted midway.
        const sub = yield* TestWebhooks.subscribe("owner-f", "http://127.0.0.1:9/f", ["f-a"])
        for (let i = 0; i < 4; i++) yield* TestWebhooks.append("f-a", { i })
        assert.strictEqual((yield* TestWebhooks.round())._tag, "Processed")
        yield* sql`
          WITH first AS (
            SELECT id FROM webhook_deliveries WHERE subscription_id = ${sub.id}::uuid ORDER BY event_seq LIMIT 1
          ), numbered AS (
            UPDATE webhook_deliveries AS d SET sequence = 1, attempts = 1 FROM first WHERE d.id = first.id
          )
          UPDATE webhook_subscriptions SET last_sequence = 1 WHERE id = ${sub.id}::uuid`
        for (let i = 4; i < 6; i++) yield* TestWebhooks.append("f-a", { i })
        yield* (yield* Jobs).insert([{ kind: "test.kept", args: { n: 1 } }])
        const partition = yield* lastPartition
        const interrupted = yield* PendingDetach.leave(partition)
        assert.isTrue(Exit.isFailure(interrupted), "the detach was cancelled")
        assert.deepStrictEqual(yield* PendingDetach.pending, [partition])

        const before = yield* state
        assert.isTrue(before.head > before.cursors.find((c) => c.name === "webhooks")!.lastSeq, "events not read yet")
        assert.strictEqual(before.jobs.length, 2, "a drain job and the other one")
        assert.strictEqual(before.deliveries.length, 4)

        const first = yield* RestoreFinalize.finalize()
        const after = yield* state
        assert.strictEqual(first.head, before.head)
        assert.strictEqual(first.previousEpoch, before.epoch)
        assert.isAbove(first.epoch, before.epoch)
        assert.strictEqual(after.epoch, first.epoch)
        assert.deepStrictEqual(
          after.cursors.map((c) => [c.name, c.lastSeq]),
          before.cursors.map((c) => [c.name, before.head]),
          "every cursor at the head",
        )
        assert.deepStrictEqual(
          first.cursors.map((c) => [c.name, c.from, c.to]),
          before.cursors.map((c) => [c.name, c.lastSeq, before.head]),
        )
        assert.deepStrictEqual(first.detached, [partition])
        assert.deepStrictEqual(yield* PendingDetach.pending, [], "no detach pending")
        const [still] = yield* sql<{ n: number }>`
          SELECT count(*)::int AS n FROM pg_inherits WHERE inhrelid = ${partition}::regclass`
        assert.strictEqual(still!.n, 0, "detached, not merely pending")
        assert.deepStrictEqual(after.jobs, before.jobs, "every job kept, with its id and state")
        assert.deepStrictEqual(
          after.deliveries.map((d) => [d.id, d.eventSeq, d.state, d.sequence]),
          before.deliveries.map((d) => [d.id, d.eventSeq, d.state, d.sequence]),
          "every delivery kept, with its id and number",
        )
        assert.deepStrictEqual(
          after.deliveries.map((d) => d.epoch),
          before.deliveries.map((d) => (d.sequence === null ? first.epoch : before.epoch)),
          "the numbered one keeps its epoch (its webhook-id); the others go out in the new epoch",
        )
        assert.deepStrictEqual(first.deliveries, { numbered: 1, carried: 3 })
        const printed = RestoreFinalize.lines(first)
        assert.include(
          printed,
          `epoch ${before.epoch} -> ${first.epoch} (head seq ${before.head}: the seqs after it are numbered in epoch ${first.epoch})`,
        )
        for (const c of before.cursors) {
          assert.include(printed, `cursor ${c.name}: ${c.lastSeq} -> ${before.head}`)
        }
        assert.include(printed, `detach finalized: ${partition} (now a table of its own, with its rows; not dropped)`)

        // Run twice in a row: nothing new to do, and no work created; one more epoch.
        const second = yield* RestoreFinalize.finalize()
        const again = yield* state
        assert.deepStrictEqual(again.jobs, after.jobs, "no job created")
        assert.deepStrictEqual(
          again.deliveries.map((d) => [d.id, d.sequence]),
          after.deliveries.map((d) => [d.id, d.sequence]),
          "no delivery created",
        )
        assert.deepStrictEqual(
          second.cursors.map((c) => c.from === c.to && c.to === before.head),
          before.cursors.map(() => true),
          "every cursor at the head already",
        )
        assert.include(RestoreFinalize.lines(second), `cursor webhooks: at ${before.head} already`)
        assert.deepStrictEqual(second.detached, [])
        assert.isAbove(second.epoch, first.epoch, "epochs only grow")

        // What producers append from now on follows the head, in the new epoch.
        const appended = yield* TestWebhooks.append("f-a", { i: 6 })
        assert.strictEqual(appended.firstSeq, before.head + 1n)
        assert.strictEqual(appended.epoch, second.epoch)
      }),
  )

  it.effect(
    "RestoreFinalizeSetsCursorsToHead: refused while a worker holds a live lease or a round holds a cursor, changing nothing",
    () =>
      Effect.gen(function* () {
        const before = yield* state
        yield* JobLease.renew("worker-on-the-restored-db", 60_000)
        const refused = yield* RestoreFinalize.finalize().pipe(Effect.flip)
        assert.strictEqual(refused._tag, "WorkersStillRunning")
        assert.match(refused.message, /worker-on-the-restored-db/)
        yield* JobLease.release("worker-on-the-restored-db")

        // A round in progress on another connection holds the `push` cursor.
        const other = yield* TestDatabase.otherClient
        const locked = yield* Effect.gen(function* () {
          yield* other`SELECT 1 FROM event_consumer_cursors WHERE name = 'push' FOR UPDATE`
          return yield* RestoreFinalize.finalize().pipe(Effect.flip)
        }).pipe(other.withTransaction)
        assert.strictEqual(locked._tag, "ConsumerRoundRunning")
        assert.deepStrictEqual(yield* state, before, "nothing changed")
      }).pipe(Effect.scoped),
  )
})
