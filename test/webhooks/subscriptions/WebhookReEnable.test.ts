import { assert, layer } from "@effect/vitest"
import { Duration, Effect, Fiber } from "effect"
import { SqlClient, Statement } from "effect/sql"
import { disable } from "../../../src/webhooks/subscriptions/SubscriptionStates.ts"
import { WebhookSubscriptions } from "../../../src/webhooks/subscriptions/WebhookSubscriptions.ts"
import * as WebhookReceiver from "../../../testkit/WebhookReceiver.ts"
import { eventually } from "../../support/Eventually.ts"
import * as RowLock from "../../support/RowLock.ts"
import * as TestWebhooks from "../../support/TestWebhooks.ts"

const Live = TestWebhooks.layer({ retrySteps: [Duration.millis(10)] })

/**
 * Retention's effect on `seqs`: their events move to a day partition 30 days back, which is then
 * detached and dropped, so they have left the log.
 */
const dropFromLog = (seqs: ReadonlyArray<bigint>) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    yield* sql`
      CREATE TABLE event_log_old PARTITION OF event_log
      FOR VALUES FROM (date_trunc('day', now() - interval '30 days')) TO (date_trunc('day', now() - interval '29 days'))`
    yield* sql`
      UPDATE event_log SET occurred_at = date_trunc('day', now() - interval '30 days') + interval '1 hour'
      WHERE seq IN ${sql.in(seqs.map(String))}`
    yield* sql`ALTER TABLE event_log DETACH PARTITION event_log_old`
    yield* sql`DROP TABLE event_log_old`
  })

const append = (space: string, i: number) => TestWebhooks.append(space, { i })

/** The advisory lock the paused round waits on (`pausedBeforeCursorLock`). */
const pauseKey = 918_001

/**
 * Makes the one-statement round wait, after its statement's snapshot is taken and before it locks
 * the cursor row, until `pauseKey` is free: the round's cursor lock gets a condition that takes it.
 */
const pausedBeforeCursorLock: Statement.Transformer = (self, sql) => {
  const [text, params] = self.compile()
  if (!/xmin AS version/.test(text)) return Effect.succeed(self)
  const paused = text.replace(
    "FOR UPDATE SKIP LOCKED",
    `AND (SELECT true FROM pg_advisory_xact_lock_shared(${pauseKey})) FOR UPDATE SKIP LOCKED`,
  )
  return Effect.succeed(sql.unsafe(paused, params))
}

layer(Live, { excludeTestServices: true })("Re-enabling a subscription", (it) => {
  it.effect(
    "ReEnableAfterGap from a seq still in the log: the events from it on are sent in seq order under the next numbers; a seq that left the log is refused naming the oldest kept",
    () =>
      Effect.gen(function* () {
        const webhooks = yield* WebhookSubscriptions
        const signals = yield* TestWebhooks.signals
        const receiver = yield* WebhookReceiver.start(() => ({ status: 200 }))
        const sub = yield* TestWebhooks.subscribe("owner-g", receiver.url("/g"), ["g-a"])
        // 0 and 1 get deliveries, then leave the log before they are sent; 2 is still there.
        const first = yield* append("g-a", 0)
        const second = yield* append("g-a", 1)
        yield* append("g-a", 2)
        yield* TestWebhooks.round()
        yield* dropFromLog([first.firstSeq, second.firstSeq])
        // The drainer finds the event of its next delivery gone: the subscription is disabled (gap).
        yield* TestWebhooks.startDrainers(signals)
        yield* signals.until(Effect.map(webhooks.get(sub.id), (s) => s.disabledCause === "gap"))
        // While it is disabled: one in its scope, one outside, one in it; the rounds skip it.
        yield* append("g-a", 3)
        yield* append("g-other", 4)
        yield* append("g-a", 5)
        yield* TestWebhooks.round()
        assert.deepStrictEqual(
          (yield* TestWebhooks.deliveries(sub.id)).map((d) => [d.i, d.state, d.deadReason]),
          [
            [null, "dead", "disabled:gap"],
            [null, "dead", "disabled:gap"],
            [2, "dead", "disabled:gap"],
          ],
        )

        const gone = yield* webhooks.enable(sub.id, { fromSeq: first.firstSeq }).pipe(Effect.flip)
        assert.strictEqual(gone._tag, "SeqNotInLog")
        assert.strictEqual(gone._tag === "SeqNotInLog" ? gone.oldestKept : undefined, second.firstSeq + 1n)
        assert.strictEqual(
          gone.message,
          `webhook subscription ${sub.id} cannot be enabled from seq ${first.firstSeq}: it left the log (retention); the oldest seq kept is ${second.firstSeq + 1n}`,
        )
        const ahead = yield* webhooks.enable(sub.id, { fromSeq: 100n }).pipe(Effect.flip)
        // The head: the six events, and the operational event of the disable.
        assert.match(ahead.message, /from seq 100: it is after the head of the log \(7\)$/)
        assert.strictEqual((yield* webhooks.get(sub.id)).state, "disabled", "refused: nothing changed")

        const enabled = yield* webhooks.enable(sub.id, { fromSeq: second.firstSeq + 1n })
        assert.deepStrictEqual(enabled, { _tag: "Enabled", after: second.firstSeq, deliveries: 3 })
        yield* TestWebhooks.deliveredThrough(signals, sub.id, 5)
        yield* append("g-a", 6)
        yield* TestWebhooks.round()
        yield* TestWebhooks.deliveredThrough(signals, sub.id, 6)
        assert.deepStrictEqual(
          receiver.log.map((r) => [TestWebhooks.envelope(r).data.i, TestWebhooks.envelope(r).sequence]),
          [
            [2, 1],
            [3, 2],
            [5, 3],
            [6, 4],
          ],
          "the missed events still in the log in seq order, then the new one; the numbering goes on",
        )
        assert.deepStrictEqual(yield* webhooks.enable(sub.id), { _tag: "AlreadyActive" })
      }),
  )

  it.effect(
    "ReEnableAfterGap from the head: what happened while disabled is not sent, the next event is, and the numbering goes on",
    () =>
      Effect.gen(function* () {
        const webhooks = yield* WebhookSubscriptions
        const signals = yield* TestWebhooks.signals
        const receiver = yield* WebhookReceiver.start(() => ({ status: 200 }))
        const sub = yield* TestWebhooks.subscribe("owner-h", receiver.url("/h"), ["h-a"])
        yield* TestWebhooks.startDrainers(signals)
        yield* append("h-a", 0)
        yield* TestWebhooks.round()
        yield* TestWebhooks.deliveredThrough(signals, sub.id, 0)
        yield* disable([sub.id], "gap")
        yield* append("h-a", 1)
        yield* append("h-a", 2)
        yield* TestWebhooks.round()
        const { seq: head } = yield* Effect.flatMap(SqlClient.SqlClient, (sql) =>
          Effect.map(sql<{ seq: bigint }>`SELECT value AS seq FROM event_seq`, ([row]) => row!),
        )
        assert.deepStrictEqual(yield* webhooks.enable(sub.id), { _tag: "Enabled", after: head, deliveries: 0 })
        const s = yield* webhooks.get(sub.id)
        assert.deepStrictEqual([s.state, s.disabledCause, s.startedSeq], ["active", null, head])
        yield* append("h-a", 3)
        yield* TestWebhooks.round()
        yield* TestWebhooks.deliveredThrough(signals, sub.id, 3)
        assert.deepStrictEqual(
          receiver.log.map((r) => [TestWebhooks.envelope(r).data.i, TestWebhooks.envelope(r).sequence]),
          [
            [0, 1],
            [3, 2],
          ],
        )
      }),
  )

  it.effect(
    "ReEnableDuringRoundLosesNothing: a re-enabling from a seq that commits after a one-statement round took its snapshot and before it locked the cursor: every event from that seq on gets its delivery",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const webhooks = yield* WebhookSubscriptions
        const receiver = yield* WebhookReceiver.start(() => ({ status: 200 }))
        const sub = yield* TestWebhooks.subscribe("owner-r", receiver.url("/r"), ["r-a"])
        yield* disable([sub.id], "gap")
        // Read while disabled (no delivery), then two the cursor has not reached yet.
        const from = yield* append("r-a", 1)
        yield* TestWebhooks.round()
        yield* append("r-a", 2)
        yield* append("r-a", 3)

        const pause = yield* RowLock.hold(sql`SELECT pg_advisory_xact_lock(${pauseKey})`)
        const round = yield* TestWebhooks.round().pipe(
          Effect.provideService(Statement.CurrentTransformer, pausedBeforeCursorLock),
          Effect.forkChild,
        )
        yield* eventually(
          sql<{ n: number }>`
            SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND objid = ${pauseKey} AND NOT granted`,
          ([row]) => row!.n === 1,
          { what: "the round waiting before its cursor lock", within: "20 seconds", every: "10 millis" },
        )
        assert.deepStrictEqual(yield* webhooks.enable(sub.id, { fromSeq: from.firstSeq }), {
          _tag: "Enabled",
          after: from.firstSeq - 1n,
          deliveries: 1,
        })
        yield* pause.release
        yield* Fiber.join(round)
        yield* TestWebhooks.round()
        assert.deepStrictEqual(
          (yield* TestWebhooks.deliveries(sub.id)).map((d) => [d.i, d.state]),
          [
            [1, "pending"],
            [2, "pending"],
            [3, "pending"],
          ],
        )
      }),
  )
})
