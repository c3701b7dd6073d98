/**
 * The receiver kit (`bothy/receiver`) as a receiving team runs it: an HTTP endpoint that hands each
 * push to the kit and answers what the kit says, in front of an application that records what it
 * is handed. Real drainers push to it; the feed is the admin API's, read over HTTP with the owner's
 * token.
 */
import { assert, it, layer } from "@effect/vitest"
import { Duration, Effect, Queue, Redacted, Result } from "effect"
import { FetchHttpClient } from "effect/http"
import { AdminAuth, principal, Unauthenticated } from "../../src/admin/AdminAuth.ts"
import * as LoopbackEndpoint from "../../src/demo/LoopbackEndpoint.ts"
import * as RestoreFinalize from "../../src/ops/RestoreFinalize.ts"
import * as Receiver from "../../src/receiver/Receiver.ts"
import * as ReceiverStore from "../../src/receiver/ReceiverStore.ts"
import * as TestAdmin from "../support/TestAdmin.ts"
import * as TestDatabase from "../support/TestDatabase.ts"
import * as TestWebhooks from "../support/TestWebhooks.ts"

const auth = AdminAuth.make((request) =>
  request.headers.authorization === "Bearer alice-token"
    ? Effect.succeed(principal("alice"))
    : Effect.fail(new Unauthenticated({ detail: "unknown token" })),
)

/** What reached the endpoint: the push as it came, and the status it was answered with. */
interface Arrived {
  readonly sequence: bigint
  readonly headers: Record<string, string>
  readonly body: string
  readonly status: number
  readonly dropped: boolean
}

const sequenceOf = (id: string) => BigInt(/_([0-9]+)$/.exec(id)?.[1] ?? "0")

// A refused push comes again after 200 ms (±20 %), so the test waits for retries, not for hours.
layer(TestWebhooks.layer({ retrySteps: [Duration.millis(200)] }), { excludeTestServices: true })(
  "the receiver kit",
  (it) => {
    it.effect(
      "ReceiverKitFillsGapFromFeed: pushes the endpoint answers but loses are filled from the feed, so the application gets every message once, in order; repeats and forgeries change nothing",
      () =>
        Effect.gen(function* () {
          const signals = yield* TestWebhooks.signals
          yield* TestWebhooks.startDrainers(signals)
          const base = yield* TestAdmin.serve(auth)
          const app = yield* Queue.unbounded<Receiver.Message>()
          const arrived: Array<Arrived> = []
          // Lost on purpose: answered 204 the first time, never shown to the kit.
          const lose = new Set([3n, 4n, 7n])

          let kit: Receiver.Receiver<never, never> | undefined
          const endpoint = yield* LoopbackEndpoint.listen(({ request, response, body: bytes }) => {
            const headers = Object.fromEntries(
              Object.entries(request.headers).map(([k, v]) => [k, Array.isArray(v) ? v.join(",") : String(v)]),
            )
            const body = bytes.toString("utf8")
            const sequence = sequenceOf(headers["webhook-id"] ?? "")
            if (lose.delete(sequence)) {
              arrived.push({ sequence, headers, body, status: 204, dropped: true })
              response.writeHead(204).end()
              return
            }
            void Effect.runPromise(
              kit!.receive({ headers, body }).pipe(Effect.result, Effect.provide(FetchHttpClient.layer)),
            ).then((result) => {
              const status = Receiver.statusOf(Result.isSuccess(result) ? result.success : result.failure)
              arrived.push({ sequence, headers, body, status, dropped: false })
              response.writeHead(status).end()
            })
          })
          const { id, secret } = yield* TestWebhooks.subscribe("alice", `${endpoint.origin}/hooks`, ["space-kit"])
          kit = yield* Receiver.make({
            secrets: [secret],
            feed: { url: base, token: Redacted.make("alice-token"), pageSize: 2 },
            handle: (message) => Queue.offer(app, message).pipe(Effect.asVoid),
          })

          const count = 10
          for (let i = 1; i <= count; i++) yield* TestWebhooks.append("space-kit", { i, note: `message ${i} ✓` })
          yield* TestWebhooks.round()

          const handed: Array<Receiver.Message> = []
          for (let i = 0; i < count; i++) handed.push(yield* Queue.take(app).pipe(Effect.timeout("60 seconds")))

          // Every message once, in order, with the bytes its push carried (the lost ones too).
          assert.deepStrictEqual(
            handed.map((m) => m.sequence),
            Array.from({ length: count }, (_, i) => BigInt(i + 1)),
          )
          assert.deepStrictEqual(
            handed.map((m) => m.envelope.data),
            Array.from({ length: count }, (_, i) => ({ i: i + 1, note: `message ${i + 1} ✓` })),
          )
          const pushedBody = new Map(arrived.map((a) => [a.sequence, a.body]))
          for (const m of handed) {
            assert.strictEqual(m.body, pushedBody.get(m.sequence), `message ${m.sequence}`)
            assert.strictEqual(m.subscription, id)
            assert.match(m.id, new RegExp(`^msg_${m.epoch}_${id}_${m.sequence}$`))
          }
          assert.deepStrictEqual(
            handed.filter((m) => m.source === "feed").map((m) => m.sequence),
            [3n, 4n, 7n],
          )
          // The pushes after a gap were refused until the feed held it, and came again.
          const refused = arrived.filter((a) => a.status === 503).map((a) => a.sequence)
          assert.isTrue(
            refused.every((s) => s === 5n || s === 8n),
            `refused: ${refused.join(", ")}`,
          )

          // A repeat of a push (its request answered, the answer lost) is dropped; a forgery refused.
          const second = arrived.find((a) => a.sequence === 2n)!
          const repeat = yield* kit.receive(second).pipe(Effect.provide(FetchHttpClient.layer))
          assert.deepStrictEqual(repeat, { _tag: "Duplicate", id: second.headers["webhook-id"]! })
          const forged = yield* kit
            .receive({ headers: second.headers, body: second.body.replace("message 2", "message X") })
            .pipe(Effect.flip, Effect.provide(FetchHttpClient.layer))
          assert.strictEqual(forged._tag, "InvalidSignature")
          // Nothing more was handed over, and the feed holds nothing after the last message.
          assert.strictEqual(yield* kit.catchUp(id).pipe(Effect.provide(FetchHttpClient.layer)), 0)
          assert.strictEqual(yield* Queue.size(app), 0)
        }),
    )
  },
)

/**
 * An endpoint that hands every push to the kit of the moment and answers what it says; a push whose
 * `<epoch>.<sequence>` is in `lose` is answered 204 the first time and never shown to the kit.
 */
const kitEndpoint = (current: () => Receiver.Receiver<never, never>, lose: Set<string>) =>
  LoopbackEndpoint.listen(({ request, response, body }) => {
    const headers = Object.fromEntries(
      Object.entries(request.headers).map(([k, v]) => [k, Array.isArray(v) ? v.join(",") : String(v)]),
    )
    const [, epoch, sequence] = /^msg_([0-9]+)_.+_([0-9]+)$/.exec(headers["webhook-id"] ?? "") ?? []
    if (lose.delete(`${epoch}.${sequence}`)) {
      response.writeHead(204).end()
      return
    }
    void Effect.runPromise(
      current()
        .receive({ headers, body: body.toString("utf8") })
        .pipe(Effect.result, Effect.provide(FetchHttpClient.layer)),
    ).then((result) => {
      response.writeHead(Receiver.statusOf(Result.isSuccess(result) ? result.success : result.failure)).end()
    })
  })

it.live(
  "ReceiverKitCrossesARestore: after a restore the new epoch numbers on from the backup's, below the kit's position; the kit asks the feed where the epoch begins (its first message lost) and hands the new messages over once, in order",
  () =>
    Effect.gen(function* () {
      const db = yield* TestDatabase.restorable("kit_restore")
      const onDb = TestWebhooks.layerAt(db.name, {
        secretKey: TestWebhooks.secretKey(),
        retrySteps: [Duration.millis(200)],
      })
      const app = yield* Queue.unbounded<Receiver.Message>()
      // What the receiver remembers outlives each kit (and the database's history).
      const store = ReceiverStore.memory()
      let kit: Receiver.Receiver<never, never> | undefined
      const lose = new Set<string>()
      const endpoint = yield* kitEndpoint(() => kit!, lose)
      const sub = yield* TestWebhooks.subscribe("alice", `${endpoint.origin}/hooks`, ["space-restore"]).pipe(
        Effect.provide(onDb),
      )
      const take = (n: number) =>
        Effect.forEach(Array.from({ length: n }), () => Queue.take(app).pipe(Effect.timeout("60 seconds")))

      /** A phase on the database as it is now: drainers, the admin API, a kit on it; `n` events from `from`. */
      const phase = (from: number, n: number) =>
        Effect.gen(function* () {
          const signals = yield* TestWebhooks.signals
          yield* TestWebhooks.startDrainers(signals)
          const base = yield* TestAdmin.serve(auth)
          kit = yield* Receiver.make({
            secrets: [sub.secret],
            feed: { url: base, token: Redacted.make("alice-token") },
            store,
            handle: (message) => Queue.offer(app, message).pipe(Effect.asVoid),
          })
          for (let i = from; i < from + n; i++) yield* TestWebhooks.append("space-restore", { i })
          yield* TestWebhooks.round()
          const handed = yield* take(n)
          yield* TestWebhooks.deliveredThrough(signals, sub.id, from + n - 1)
          return handed
        }).pipe(Effect.scoped, Effect.provide(onDb))

      const before = yield* phase(0, 2)
      yield* db.backUp
      const lost = yield* phase(2, 2)
      const seen = [...before, ...lost]
      const oldEpoch = seen[0]!.epoch
      assert.deepStrictEqual(
        seen.map((m) => [m.epoch, m.sequence, m.envelope.data]),
        [0, 1, 2, 3].map((i) => [oldEpoch, BigInt(i + 1), { i }]),
      )

      // The restore undoes 2 and 3; the new epoch numbers 4 and 5 as 3 and 4, below the kit's position,
      // and the endpoint loses the new epoch's first message: only the feed can say where it begins.
      yield* db.restore
      const finalized = yield* RestoreFinalize.finalize().pipe(Effect.provide(onDb))
      assert.notStrictEqual(finalized.epoch, oldEpoch)
      lose.add(`${finalized.epoch}.3`)
      const after = yield* phase(4, 2)
      assert.deepStrictEqual(
        after.map((m) => [m.epoch, m.sequence, m.envelope.data, m.source]),
        [
          [finalized.epoch, 3n, { i: 4 }, "feed"],
          [finalized.epoch, 4n, { i: 5 }, "push"],
        ],
      )
      assert.strictEqual(yield* Queue.size(app), 0, "nothing handed over twice")
    }).pipe(Effect.scoped),
  120_000,
)
