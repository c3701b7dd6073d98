import { assert, layer } from "@effect/vitest"
import { Duration, Effect, Layer, Redacted } from "effect"
import { SqlClient } from "effect/sql"
import * as JobWorker from "../../../src/jobs/JobWorker.ts"
import { messageId } from "../../../src/webhooks/drain/WebhookSignature.ts"
import * as BulkRecovery from "../../../src/webhooks/subscriptions/BulkRecovery.ts"
import type { RecoveryFilter as BulkRecoveryFilter } from "../../../src/webhooks/subscriptions/RecoveryFilter.ts"
import { WebhookSubscriptions } from "../../../src/webhooks/subscriptions/WebhookSubscriptions.ts"
import * as WebhookReceiver from "../../../testkit/WebhookReceiver.ts"
import * as TestWebhooks from "../../support/TestWebhooks.ts"

const Live = TestWebhooks.layer({ retrySteps: [Duration.seconds(1)] })

/** A worker that runs bulk recoveries only (the drainers run in another), on queue `webhooks`. */
const startRecoveries = (signals: TestWebhooks.Signals) =>
  Effect.gen(function* () {
    const kind = yield* BulkRecovery.make
    yield* Layer.build(
      JobWorker.layer({
        kinds: [kind],
        queues: { webhooks: { concurrency: 1 } },
        pollInterval: "50 millis",
        onFinalized: signals.onFinalized,
      }),
    )
  })

interface Row {
  readonly id: bigint
  readonly sub: string
  readonly i: number
  readonly type: string
  readonly state: string
  readonly sequence: bigint | null
  readonly epoch: number
}

const rows = Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => sql<Row>`
    SELECT d.id, d.subscription_id::text AS sub, (e.payload->>'i')::int AS i, e.type, d.state, d.sequence, d.epoch
    FROM webhook_deliveries AS d JOIN event_log AS e ON e.seq = d.event_seq
    ORDER BY d.subscription_id, d.event_seq`,
)

const types = ["order.created", "user.created", "order.paid", "order.created"]

/**
 * Five subscriptions (three of `alice`, two of `bob`), each with four events whose deliveries all
 * end dead (`disabled:manual`): the endpoint failed the first, then each was disabled and enabled
 * again from the head. The receiver answers 200 from then on.
 */
const fiveFailed = Effect.gen(function* () {
  const webhooks = yield* WebhookSubscriptions
  const signals = yield* TestWebhooks.signals
  let healthy = false
  const receiver = yield* WebhookReceiver.start(() => ({ status: healthy ? 200 : 500 }))
  const owners = ["alice", "alice", "alice", "bob", "bob"]
  const subs: Array<string> = []
  for (const [n, owner] of owners.entries()) {
    subs.push((yield* TestWebhooks.subscribe(owner, receiver.url(`/${n}`), [`space-${n}`])).id)
  }
  for (const [n] of owners.entries()) {
    for (const [i, type] of types.entries()) yield* TestWebhooks.append(`space-${n}`, { i }, type)
  }
  yield* TestWebhooks.round()
  yield* TestWebhooks.startDrainers(signals)
  // Each endpoint failed its first delivery once (it took sequence 1 for it).
  yield* signals.until(Effect.map(rows, (rs) => subs.every((s) => rs.some((r) => r.sub === s && r.sequence !== null))))
  for (const id of subs) yield* webhooks.disable(id)
  for (const id of subs) yield* webhooks.enable(id)
  // The disables appended their `bothy.subscription.disabled` events: a round reads past them, up
  // to where the enabled subscriptions start, before any of them can be recovered.
  yield* TestWebhooks.round()
  healthy = true
  return { webhooks, signals, receiver, subs }
})

/** The filter's refusal (any other failure fails the test). */
const refused = (filter: BulkRecoveryFilter) =>
  BulkRecovery.request(filter).pipe(
    Effect.flip,
    Effect.map((e) =>
      e._tag === "InvalidRecoveryFilter" ? e : assert.fail(`expected InvalidRecoveryFilter, got ${e._tag}`),
    ),
  )

const done = (job: bigint) => Effect.map(BulkRecovery.get(job), (r) => r.state === "done")

layer(Live, { excludeTestServices: true })("Bulk recovery", (it) => {
  it.effect(
    "BulkRecoverByFilter: across 5 subscriptions, only alice's dead order.* deliveries are sent again, each once, under their own ids and sequence, in seq order per subscription",
    () =>
      Effect.gen(function* () {
        const { signals, receiver, subs } = yield* fiveFailed
        const before = yield* rows
        assert.isTrue(
          before.every((r) => r.state === "dead"),
          "every delivery ended dead when its subscription was disabled",
        )
        const failedBefore = receiver.log.length
        const selected = before.filter((r) => subs.indexOf(r.sub) < 3 && r.type.startsWith("order."))
        assert.strictEqual(selected.length, 9)

        const { job, total } = yield* BulkRecovery.request(
          { owner: "alice", eventTypes: ["order.*"], states: ["failed"] },
          { batchSize: 2 },
        )
        assert.strictEqual(total, 9, "what the filter selected when asked")
        yield* startRecoveries(signals)
        yield* signals.until(done(job))
        yield* signals.until(
          Effect.map(rows, (rs) => rs.filter((r) => r.state === "delivered").length === selected.length),
        )
        const recovery = yield* BulkRecovery.get(job)
        assert.deepStrictEqual([recovery.examined, recovery.resent, recovery.skipped], [9, 9, 0])

        const after = yield* rows
        const delivered = after.filter((r) => r.state === "delivered")
        assert.deepStrictEqual(
          delivered.map((r) => r.id),
          selected.map((r) => r.id),
          "the very rows selected went out, and nothing else",
        )
        assert.isTrue(
          after.filter((r) => r.state === "dead").every((r) => subs.indexOf(r.sub) >= 3 || r.type === "user.created"),
        )

        const resent = receiver.log.slice(failedBefore)
        assert.strictEqual(resent.length, 9, "one request per selected delivery")
        for (const sub of subs.slice(0, 3)) {
          const path = `/${subs.indexOf(sub)}`
          const got = resent.filter((r) => r.path === path).map(TestWebhooks.envelope)
          assert.deepStrictEqual(
            got.map((e) => e.data.i),
            [0, 2, 3],
            `subscription ${sub}: its order.* events, in seq order`,
          )
          const mine = after.filter((r) => r.sub === sub && r.state === "delivered")
          const first = before.find((r) => r.sub === sub && r.i === 0)!
          assert.strictEqual(mine[0]!.sequence, first.sequence, "the one that was sent before keeps its sequence")
          assert.deepStrictEqual(
            resent.filter((r) => r.path === path).map((r) => r.headers["webhook-id"]),
            mine.map((r) => messageId(r.epoch, sub, r.sequence!)),
            "webhook-id from the delivery's own number",
          )
          assert.deepStrictEqual(
            got.map((e) => e.sequence),
            [1, 2, 3],
            "gap-free: the first keeps 1, the rest take the next",
          )
        }
      }),
  )

  it.effect(
    "ReplayToNewUrl: a subscription's range goes to a new subscription at another URL, numbered from 1 in seq order, followed by what came since",
    () =>
      Effect.gen(function* () {
        const { webhooks, signals, subs } = yield* fiveFailed
        const signed: Array<boolean | undefined> = []
        const moved = yield* WebhookReceiver.start((r) => {
          signed.push(r.signature?.valid)
          return { status: 200 }
        })
        const old = subs[1]!
        const { job, replay } = yield* BulkRecovery.request(
          { subscriptions: [old], eventTypes: ["order.*"] },
          { replayTo: { url: moved.url("/moved") }, batchSize: 2 },
        )
        const created = yield* webhooks.get(replay!.subscription)
        assert.strictEqual(created.state, "disabled", "disabled while it is seeded")
        assert.strictEqual(created.owner, "alice")
        assert.deepStrictEqual(created.scope, ["space-1"])
        moved.trust("/moved", Redacted.value(replay!.secret))
        // An event after the replay was asked for: the new subscription gets it after the range.
        yield* TestWebhooks.append("space-1", { i: 4 }, "order.created")
        yield* TestWebhooks.round()
        yield* startRecoveries(signals)
        yield* signals.until(done(job))
        yield* signals.until(Effect.sync(() => moved.log.length >= 4))
        assert.strictEqual((yield* webhooks.get(replay!.subscription)).state, "active")
        const envelopes = moved.log.map(TestWebhooks.envelope)
        assert.deepStrictEqual(
          envelopes.map((e) => [e.data.i, e.sequence]),
          [
            [0, 1],
            [2, 2],
            [3, 3],
            [4, 4],
          ],
        )
        assert.deepStrictEqual(signed, [true, true, true, true], "signed with the new subscription's secret")
        assert.deepStrictEqual(
          moved.log.map((r) => r.headers["webhook-id"]),
          envelopes.map((e) => messageId(e.epoch, replay!.subscription, BigInt(e.sequence))),
        )
        const oldRows = (yield* rows).filter((r) => r.sub === old)
        assert.isTrue(
          oldRows.filter((r) => r.i !== 4).every((r) => r.state === "dead"),
          "the old subscription's deliveries are left as they were",
        )
      }),
  )

  it.effect(
    "InvalidRecoveryFilter: an unknown state, an inverted time range and a filter with no selector are refused, naming the field; nothing is written",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const count = Effect.map(sql<{ n: number }>`SELECT count(*)::int AS n FROM webhook_recoveries`, ([r]) => r!.n)
        const recoveries = yield* count
        const unknown = yield* refused({ owner: "a", states: ["failed", "lost"] })
        assert.deepStrictEqual(
          [unknown._tag, unknown.field, unknown.reason],
          ["InvalidRecoveryFilter", "states[1]", "UnknownState"],
        )
        const pending = yield* refused({ owner: "a", states: ["pending"] })
        assert.strictEqual(pending.field, "states[0]")
        const inverted = yield* refused({
          owner: "a",
          since: new Date("2026-12-02T00:00:00Z"),
          until: new Date("2026-12-01T00:00:00Z"),
        })
        assert.deepStrictEqual([inverted.field, inverted.reason], ["until", "InvertedRange"])
        const broad = yield* refused({ states: ["dead"] })
        assert.deepStrictEqual([broad.field, broad.reason], ["", "TooBroad"])
        assert.match(broad.message, /say all: true/)
        assert.strictEqual(yield* count, recoveries, "nothing was written")
        const all = yield* BulkRecovery.request({ all: true })
        const [failed] = yield* sql<{ n: number }>`
          SELECT count(*)::int AS n FROM webhook_deliveries
          WHERE state = 'dead' AND (dead_reason LIKE 'disabled:%' OR dead_reason = 'stale')`
        assert.strictEqual(all.total, failed!.n, "with all: true it is accepted, and selects every failed delivery")
      }),
  )
})
