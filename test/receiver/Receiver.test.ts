/**
 * The receiver kit (`bothy/receiver`) as a receiving team runs it: an HTTP endpoint that hands each
 * push to the kit and answers what the kit says, in front of an application that records what it
 * is handed. Real drainers push to it; the feed is the admin API's, read over HTTP with the owner's
 * token.
 */
import { assert, layer } from "@effect/vitest"
import { Duration, Effect, Queue, Redacted, Result } from "effect"
import { FetchHttpClient } from "effect/http"
import { AdminAuth, principal, Unauthenticated } from "../../src/admin/AdminAuth.ts"
import * as LoopbackEndpoint from "../../src/demo/LoopbackEndpoint.ts"
import * as Receiver from "../../src/receiver/Receiver.ts"
import * as TestAdmin from "../support/TestAdmin.ts"
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
