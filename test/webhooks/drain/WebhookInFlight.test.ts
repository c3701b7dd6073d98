import { assert, layer } from "@effect/vitest"
import { Clock, Effect, Layer, Option, Queue } from "effect"
import * as Worker from "../../../src/bin/Worker.ts"
import * as JobWorker from "../../../src/jobs/JobWorker.ts"
import * as WebhookDrainer from "../../../src/webhooks/drain/WebhookDrainer.ts"
import * as WebhookFanOut from "../../../src/webhooks/WebhookFanOut.ts"
import * as WebhookReceiver from "../../../testkit/WebhookReceiver.ts"
import * as TestWebhooks from "../../support/TestWebhooks.ts"

// The default pool (10 connections): hundreds of drainers must not starve each other of it.
const Live = TestWebhooks.layer()

const append = (space: string, n: number) => TestWebhooks.append(space, { n })

const numberIn = (r: WebhookReceiver.Received) => (JSON.parse(r.body) as { data: { n: number } }).data.n

layer(Live, { excludeTestServices: true })("Webhook in flight", (it) => {
  it.effect(
    "SlowEndpointsDoNotDelayOthers: 50 subscriptions whose receivers never answer and one healthy one: the healthy one's deliveries arrive within 1 s throughout (a hanging request holds its slot 15 s)",
    () =>
      Effect.gen(function* () {
        // The worker's own delivery jobs at its defaults (256 in flight, 32 per owner), and rounds
        // woken by every append.
        yield* Layer.build(Worker.deliveries(Option.none()))
        yield* Layer.build(WebhookFanOut.layer({ batchSize: 500, pollInterval: "1 second" }))
        // Started after the worker, so they close first at the end and the hanging requests end.
        const slow = yield* WebhookReceiver.start(() => ({ status: 200, hang: true }))
        const healthy = yield* WebhookReceiver.start(() => ({ status: 200 }))
        const space = "in-flight"
        for (let k = 0; k < 50; k++) yield* TestWebhooks.subscribe("owner-slow", slow.url(`/slow${k}`), [space])
        yield* TestWebhooks.subscribe("owner-ok", healthy.url("/ok"), [space])

        const latencies: Array<number> = []
        for (let n = 0; n < 10; n++) {
          const committed = yield* Clock.currentTimeMillis
          yield* append(space, n)
          // A guard against a hang; the bound is asserted below.
          const got = yield* Queue.take(healthy.received).pipe(Effect.timeout("20 seconds"))
          latencies.push((yield* Clock.currentTimeMillis) - committed)
          assert.strictEqual(numberIn(got), n)
          // From the first event on, the slow owner's endpoints hold as many runs as its cap allows.
          if (n === 0) yield* Effect.forEach(Array.from({ length: 32 }), () => Queue.take(slow.received))
        }
        // Behind the hanging requests, a delivery would wait for their 15 s timeout
        // (OutboundSender.defaultLimits.totalTimeout).
        assert.isAtMost(Math.max(...latencies), 1_000, `commit to arrival, ms: ${latencies.join(", ")}`)
        assert.strictEqual(slow.log.length, 32, "the slow owner's requests in flight: its cap, no more")
      }).pipe(Effect.scoped),
    120_000,
  )
})

// A database of its own: the jobs the test above leaves behind would share this one's slots.
layer(Live, { excludeTestServices: true })("Webhook in flight per owner", (it) => {
  it.effect(
    "WebhookInFlightPerOwnerCap: an owner's runs beyond its cap give their job slot back and come back later; another owner's deliveries go out meanwhile",
    () =>
      Effect.gen(function* () {
        const signals = yield* TestWebhooks.signals
        let turnedAway = 0
        const kind = yield* WebhookDrainer.makeWith({ maxInFlightPerOwner: 2 })
        yield* Layer.build(
          JobWorker.layer({
            kinds: [kind],
            queues: { webhooks: { concurrency: 4 } },
            pollInterval: "100 millis",
            onFinalized: (batch) => {
              turnedAway += batch.filter((f) => f.outcome._tag === "Snooze").length
              return signals.onFinalized()
            },
          }),
        )
        const slow = yield* WebhookReceiver.start(() => ({ status: 200, hang: true }))
        const healthy = yield* WebhookReceiver.start(() => ({ status: 200 }))
        for (let k = 0; k < 6; k++) yield* TestWebhooks.subscribe("owner-many", slow.url(`/many${k}`), ["cap"])
        yield* TestWebhooks.subscribe("owner-one", healthy.url("/one"), ["cap"])
        yield* append("cap", 0)
        yield* TestWebhooks.round()
        const got = yield* Queue.take(healthy.received).pipe(Effect.timeout("20 seconds"))
        assert.strictEqual(numberIn(got), 0, "the other owner's delivery went out")
        // Four runs over the cap, each turned away and back several times.
        yield* signals.until(Effect.sync(() => turnedAway >= 12))
        assert.strictEqual(slow.log.length, 2, "never more of the owner's requests in flight than its cap")
      }).pipe(Effect.scoped),
    60_000,
  )
})
