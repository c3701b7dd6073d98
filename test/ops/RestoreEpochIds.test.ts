import { assert, it } from "@effect/vitest"
import { Clock, Duration, Effect, Layer, Redacted } from "effect"
import { TestClock } from "effect/testing"
import { Webhook } from "standardwebhooks"
import * as PermissionGrants from "../../src/authz/PermissionGrants.ts"
import { webhookDeliver } from "../../src/authz/Permissions.ts"
import * as RestoreFinalize from "../../src/ops/RestoreFinalize.ts"
import * as WebhookFanOut from "../../src/webhooks/WebhookFanOut.ts"
import * as WebhookReceiver from "../../testkit/WebhookReceiver.ts"
import * as TestDatabase from "../support/TestDatabase.ts"
import * as TestWebhooks from "../support/TestWebhooks.ts"

/** The `webhooks` consumer and the drain jobs, for the rest of the scope. */
const startWorker = (signals: TestWebhooks.Signals) =>
  Effect.gen(function* () {
    yield* Layer.build(WebhookFanOut.layer({ batchSize: 50, pollInterval: "50 millis" }))
    yield* TestWebhooks.startDrainers(signals)
  })

/** `finalize` as a run at `millis` would (the epoch's floor comes from `Clock`). */
const finalizeAt = (millis: number) =>
  Effect.gen(function* () {
    yield* TestClock.setTime(millis)
    return yield* RestoreFinalize.finalize()
  }).pipe(Effect.provide(TestClock.layer()))

it.live(
  "RestoreEpochIdsNeverRepeat: after a restore (and a second restore of the same backup) no webhook-id and no (epoch, sequence) the receiver saw comes again with other content; what was pending comes again under its own id",
  () =>
    Effect.gen(function* () {
      const db = yield* TestDatabase.restorable("restore")
      const restore = db.restore
      // Each phase opens its own pool on the database and closes it at its end, so the copy and the
      // restore find no connection to it.
      const onDb = TestWebhooks.layerAt(db.name, {
        secretKey: TestWebhooks.secretKey(),
        retrySteps: [Duration.millis(10)],
        pool: { maxConnections: 12 },
      })
      let failing = false
      const receiver = yield* WebhookReceiver.start(() => ({ status: failing ? 500 : 200 }))
      const owner = "owner-restore"
      const [a, b] = ["restore-a", "restore-b"]
      const append = (space: string, i: number) => TestWebhooks.append(space, { i })

      // Before the backup: 0 and 1 delivered; 2 sent and failing (numbered, pending); 3 to 5 pending
      // behind it, not numbered.
      const sub = yield* Effect.gen(function* () {
        const signals = yield* TestWebhooks.signals
        const sub = yield* TestWebhooks.subscribe(owner, receiver.url("/restore"), [a, b])
        yield* startWorker(signals)
        yield* append(a, 0)
        yield* append(a, 1)
        yield* TestWebhooks.deliveredThrough(signals, sub.id, 1)
        failing = true
        yield* append(a, 2)
        yield* signals.until(
          Effect.map(TestWebhooks.deliveries(sub.id), (rows) => rows.some((d) => d.i === 2 && d.attempts > 0)),
        )
        yield* append(b, 3)
        yield* append(a, 4)
        yield* append(a, 5)
        yield* signals.until(Effect.map(TestWebhooks.deliveries(sub.id), (rows) => rows.length === 6))
        return sub
      }).pipe(Effect.scoped, Effect.provide(onDb))
      yield* db.backUp
      const atBackup = yield* TestWebhooks.deliveries(sub.id).pipe(Effect.provide(onDb))
      assert.deepStrictEqual(
        atBackup.map((d) => [d.i, d.state, d.sequence]),
        [
          [0, "delivered", 1n],
          [1, "delivered", 2n],
          [2, "pending", 3n],
          [3, "pending", null],
          [4, "pending", null],
          [5, "pending", null],
        ],
        "the backup holds a numbered and three unnumbered pending deliveries",
      )

      // The history the restore will undo: space b's right revoked (3 is suppressed, so 4 and 5
      // take the numbers 4 and 5), the endpoint back, two more events.
      const lostHistory = (from: number) =>
        Effect.gen(function* () {
          const signals = yield* TestWebhooks.signals
          yield* PermissionGrants.revoke(owner, webhookDeliver, b)
          failing = false
          yield* startWorker(signals)
          yield* append(a, from)
          yield* append(a, from + 1)
          yield* TestWebhooks.deliveredThrough(signals, sub.id, from + 1)
        }).pipe(Effect.scoped, Effect.provide(onDb))
      yield* lostHistory(6)
      const beforeRestore = receiver.log.length

      // Restore, finalize, deliver: the right on b is back (it was there at the backup), so 3 goes
      // out now, and with the old epoch would have taken the number 4, which the receiver saw on 4.
      yield* restore
      const first = yield* RestoreFinalize.finalize().pipe(Effect.provide(onDb))
      const firstAt = yield* Clock.currentTimeMillis
      yield* Effect.gen(function* () {
        const signals = yield* TestWebhooks.signals
        yield* startWorker(signals)
        yield* append(a, 8)
        yield* append(a, 9)
        yield* TestWebhooks.deliveredThrough(signals, sub.id, 9)
      }).pipe(Effect.scoped, Effect.provide(onDb))
      const afterFirst = receiver.log.slice(beforeRestore).filter((r) => r.status === 200)
      assert.deepStrictEqual(
        afterFirst.map((r) => TestWebhooks.envelope(r).data.i),
        [2, 3, 4, 5, 8, 9],
        "what was pending at the backup, then the new events",
      )
      assert.deepStrictEqual(
        afterFirst.map((r) => [TestWebhooks.envelope(r).epoch, TestWebhooks.envelope(r).sequence]),
        [
          [first.previousEpoch, 3],
          [first.epoch, 4],
          [first.epoch, 5],
          [first.epoch, 6],
          [first.epoch, 7],
          [first.epoch, 8],
        ],
        "the numbered one keeps its epoch and number; everything numbered after the restore is in the new epoch",
      )

      // The same backup restored again, a second later, and the lost history's revocation repeated:
      // 3 is suppressed again, and 4 takes the number 4 that 3 took after the first restore.
      yield* restore
      const second = yield* finalizeAt(firstAt + 1000).pipe(Effect.provide(onDb))
      assert.notStrictEqual(second.epoch, first.epoch, "two restores of one backup: two epochs")
      yield* lostHistory(10)

      // Over everything the receiver got: one content per webhook-id and per (epoch, sequence),
      // every request signed with the subscription's secret.
      const verifier = new Webhook(Redacted.value(sub.secret))
      const byId = new Map<string, number>()
      const byPair = new Map<string, number>()
      for (const r of receiver.log) {
        verifier.verify(r.body, r.headers as Record<string, string>)
        const e = TestWebhooks.envelope(r)
        const id = String(r.headers["webhook-id"])
        assert.strictEqual(id, `msg_${e.epoch}_${sub.id}_${e.sequence}`)
        assert.strictEqual(byId.get(id) ?? e.data.i, e.data.i, `${id} came again with event ${e.data.i}`)
        byId.set(id, e.data.i)
        const pair = `${e.epoch}/${e.sequence}`
        assert.strictEqual(byPair.get(pair) ?? e.data.i, e.data.i, `(${pair}) came again with event ${e.data.i}`)
        byPair.set(pair, e.data.i)
      }
      const idsOf = (i: number) =>
        new Set(receiver.log.filter((r) => TestWebhooks.envelope(r).data.i === i).map((r) => r.headers["webhook-id"]))
      assert.strictEqual(
        idsOf(2).size,
        1,
        "the delivery pending at the backup came back under the id the receiver knew",
      )
      assert.deepStrictEqual(
        [...new Set(receiver.log.map((r) => TestWebhooks.envelope(r).epoch))],
        [first.previousEpoch, first.epoch, second.epoch],
      )
    }).pipe(Effect.scoped),
  120_000,
)
