import { assert, layer } from "@effect/vitest"
import { Duration, Effect, Layer, Queue, Redacted } from "effect"
import { Webhook } from "standardwebhooks"
import * as JobWorker from "../../../src/jobs/JobWorker.ts"
import { EventLog } from "../../../src/log/EventLog.ts"
import * as WebhookDrainer from "../../../src/webhooks/drain/WebhookDrainer.ts"
import * as WebhookFanOut from "../../../src/webhooks/WebhookFanOut.ts"
import * as WebhookReceiver from "../../../testkit/WebhookReceiver.ts"
import * as TestWebhooks from "../../support/TestWebhooks.ts"

const Live = TestWebhooks.layer({ retrySteps: [Duration.millis(10)], pool: { maxConnections: 16 } })

interface Envelope {
  readonly type: string
  readonly space: string
  readonly sequence: number
  readonly data: { readonly i: number }
}

layer(Live, { excludeTestServices: true })("Webhook order", (it) => {
  it.effect(
    "WebhookDeliversSignedInOrder: every endpoint gets every matching event once per webhook-id, in order, gap-free, signed",
    () =>
      Effect.gen(function* () {
        const log = yield* EventLog
        // Random failures: about one request in five gets a 500 and is retried.
        const receiver = yield* WebhookReceiver.start(() => ({ status: Math.random() < 0.2 ? 500 : 200 }))
        const specs = [
          { path: "/all-a", scope: ["o-a"], eventTypes: [] },
          { path: "/created-ab", scope: ["o-a", "o-b"], eventTypes: ["item.created"] },
          { path: "/all-b", scope: ["o-b"], eventTypes: [] },
          { path: "/updated-c", scope: ["o-c"], eventTypes: ["item.updated"] },
        ]
        const subs: Array<
          (typeof specs)[number] & { readonly id: string; readonly secret: Redacted.Redacted<string> }
        > = []
        for (const spec of specs) {
          const created = yield* TestWebhooks.subscribe("owner-o", receiver.url(spec.path), spec.scope, spec.eventTypes)
          subs.push({ ...spec, ...created })
        }
        yield* Layer.build(WebhookFanOut.layer({ batchSize: 200, pollInterval: "500 millis" }))
        const kind = yield* WebhookDrainer.make
        // A failed delivery snoozes its drainer for the (10 ms) retry step; the poll brings it back.
        yield* Layer.build(
          JobWorker.layer({ kinds: [kind], queues: { webhooks: { concurrency: 8 } }, pollInterval: "50 millis" }),
        )

        const spaces = ["o-a", "o-b", "o-c"]
        const types = ["item.created", "item.updated"]
        const total = 2000
        const appended: Array<{ space: string; type: string; i: number }> = []
        for (let i = 0; i < total; i += 4) {
          const batch = [0, 1, 2, 3].map((k) => ({
            space: spaces[(i + k) % 3]!,
            type: types[Math.floor((i + k) / 3) % 2]!,
            actor: "tester",
            payload: { i: i + k },
          }))
          yield* log.append(batch)
          appended.push(...batch.map((b) => ({ space: b.space, type: b.type, i: b.payload.i })))
        }
        const expected = subs.map((s) =>
          appended
            .filter((e) => s.scope.includes(e.space) && (s.eventTypes.length === 0 || s.eventTypes.includes(e.type)))
            .map((e) => e.i),
        )
        const delivered = (path: string) => receiver.log.filter((r) => r.path === path && r.status === 200)
        // Wait for the receivers' own record to be complete, checking at each request they get.
        yield* Effect.gen(function* () {
          while (subs.some((s, k) => delivered(s.path).length < expected[k]!.length)) {
            yield* Queue.take(receiver.received)
          }
        }).pipe(Effect.timeout("120 seconds"))

        for (const [k, s] of subs.entries()) {
          const all = receiver.log.filter((r) => r.path === s.path)
          const ok = delivered(s.path)
          const envelopes = ok.map((r) => JSON.parse(r.body) as Envelope)
          assert.deepStrictEqual(
            envelopes.map((e) => e.data.i),
            expected[k],
            `${s.path}: every matching event, in order`,
          )
          assert.deepStrictEqual(
            envelopes.map((e) => e.sequence),
            envelopes.map((_, n) => n + 1),
            `${s.path}: sequence is gap-free`,
          )
          const ids = ok.map((r) => r.headers["webhook-id"])
          assert.strictEqual(new Set(ids).size, ids.length, `${s.path}: each webhook-id delivered once`)
          // Including failed attempts, the sequence never goes backwards: a retry comes before the next.
          const seen = all.map((r) => (JSON.parse(r.body) as Envelope).sequence)
          assert.isTrue(
            seen.every((q, n) => n === 0 || q >= seen[n - 1]!),
            `${s.path}: requests in order`,
          )
          const verifier = new Webhook(Redacted.value(s.secret))
          for (const r of all) verifier.verify(r.body, r.headers as Record<string, string>)
          assert.isAbove(all.length, ok.length, `${s.path}: some attempts failed and were retried`)
        }
      }).pipe(Effect.scoped),
    180_000,
  )
})
