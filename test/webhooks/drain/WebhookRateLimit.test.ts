/**
 * A subscription's two delivery options as the drainer applies them: the rate limit (no span of a
 * second holds more requests than it allows, retries and run boundaries included, with runs of
 * two drainers built apart as two processes would) and the extra headers (on every request, never
 * in place of the signature's).
 *
 * Rate-limited runs are driven by hand under the `TestClock` (the same job id each time, so a run
 * keeps the slot, as in WebhookRetries.test.ts): the drainer's `onPaced` signal says it has begun
 * waiting for its turn, and the test moves the clock by that wait; a snooze moves it by its delay,
 * as the job runtime would wait. The receiver stamps each arrival with the `TestClock`'s time.
 */
import { assert, layer } from "@effect/vitest"
import { Clock, Duration, Effect, Fiber, Queue, Redacted } from "effect"
import { SqlClient } from "effect/sql"
import { TestClock } from "effect/testing"
import { Webhook } from "standardwebhooks"
import type { JobInfo } from "../../../src/jobs/JobKind.ts"
import * as WebhookDrainer from "../../../src/webhooks/drain/WebhookDrainer.ts"
import { WebhookSubscriptions } from "../../../src/webhooks/subscriptions/WebhookSubscriptions.ts"
import * as WebhookReceiver from "../../../testkit/WebhookReceiver.ts"
import * as TestWebhooks from "../../support/TestWebhooks.ts"

// A failed request comes back after about 10 ms: well inside the limit's interval, so the retry
// has to wait for its turn like any request.
const Live = TestWebhooks.layer({ retrySteps: [Duration.millis(10)] })

interface Arrival {
  /** `TestClock` time when the request arrived. */
  readonly at: number
  readonly i: number
  readonly sequence: number
  readonly status: number
}

/** A receiver that stamps arrivals with the `TestClock` and answers `answer(n)` to the n-th request. */
const clockedReceiver = (answer: (n: number) => number) =>
  Effect.gen(function* () {
    const clock = yield* Clock.Clock
    const arrivals: Array<Arrival> = []
    const receiver = yield* WebhookReceiver.start(({ body }) => {
      const status = answer(arrivals.length + 1)
      const e = TestWebhooks.envelope({ body })
      arrivals.push({ at: clock.currentTimeMillisUnsafe(), i: e.data.i, sequence: e.sequence, status })
      return { status }
    })
    return { receiver, arrivals }
  })

type DrainKind = Effect.Success<ReturnType<typeof WebhookDrainer.makeWith>>

/** One run of the drain job `info`, as the job runtime would start it: the snooze it asks for, or `undefined` once it let go. */
const runOnce = (kind: DrainKind, subscription: string, info: JobInfo) =>
  kind.run({ subscription }, info).pipe(
    Effect.as(undefined),
    Effect.catchTag("JobSnooze", (snooze) => Effect.succeed(snooze.delay)),
  )

/**
 * Runs the drain job `info` by hand until it lets the slot go, alternating between `kinds` (built
 * apart: nothing in memory carries over), moving the `TestClock` by every wait the drainers signal
 * and every snooze they ask for. The snoozes' delays come back.
 */
const drainByHand = (
  kinds: ReadonlyArray<DrainKind>,
  subscription: string,
  info: JobInfo,
  paced: Queue.Queue<Duration.Duration>,
) =>
  Effect.gen(function* () {
    const mover = yield* Effect.forkChild(Effect.forever(Effect.flatMap(Queue.take(paced), TestClock.adjust)))
    const snoozes: Array<number> = []
    for (let k = 0; k < 200; k++) {
      const delay = yield* runOnce(kinds[k % kinds.length]!, subscription, info)
      if (delay === undefined) break
      snoozes.push(Duration.toMillis(delay))
      yield* TestClock.adjust(delay)
    }
    yield* Fiber.interrupt(mover)
    return snoozes
  })

/** The most arrivals in any half-open window `[t, t + span)` that starts at an arrival. */
const mostInWindow = (times: ReadonlyArray<number>, span: number) =>
  Math.max(0, ...times.map((t) => times.filter((u) => u >= t && u < t + span).length))

const gaps = (times: ReadonlyArray<number>) => times.slice(1).map((t, k) => t - times[k]!)

const signalledKinds = (count: number, paced: Queue.Queue<Duration.Duration>, maxDeliveriesPerRun: number) =>
  Effect.forEach(Array.from({ length: count }), () =>
    WebhookDrainer.makeWith({
      // Run by hand under the TestClock: a drainer that runs dry lets go at once rather than linger
      // on a clock nothing moves.
      linger: 0,
      maxDeliveriesPerRun,
      onPaced: (_, wait) => Effect.asVoid(Queue.offer(paced, wait)),
    }),
  )

layer(Live, { excludeTestServices: true })("Webhook delivery options", (it) => {
  it.effect(
    "WebhookRateLimitHeld: with rate_limit 5 and a backlog of 30, no second of arrivals holds more than 5 requests (a retry and run boundaries included), all 30 arrive in order",
    () =>
      Effect.gen(function* () {
        yield* TestClock.setTime(Date.now())
        // The 12th request fails once: its retry counts against the limit too.
        const { receiver, arrivals } = yield* clockedReceiver((n) => (n === 12 ? 500 : 200))
        const sub = yield* TestWebhooks.subscribe("owner-rate", receiver.url("/rate"), ["rate-a"])
        yield* (yield* WebhookSubscriptions).update(sub.id, { rateLimit: 5 })
        for (let i = 0; i < 30; i++) yield* TestWebhooks.append("rate-a", { i })
        yield* TestWebhooks.round()
        const paced = yield* Queue.unbounded<Duration.Duration>()
        // Two drainers built apart, taking turns, 7 deliveries a run: the pace must carry across
        // runs through the record, as it would from one worker process to another.
        const kinds = yield* signalledKinds(2, paced, 7)
        yield* drainByHand(kinds, sub.id, yield* TestWebhooks.drainJob(sub.id), paced)

        assert.strictEqual(arrivals.length, 31, "30 deliveries and one retry")
        const times = arrivals.map((a) => a.at)
        assert.strictEqual(mostInWindow(times, 1000), 5, "at most 5 in any second, and the limit is used")
        assert.isAtLeast(Math.min(...gaps(times)), 200, "each request at least 1/5 s after the one before")
        const delivered = arrivals.filter((a) => a.status === 200)
        assert.deepStrictEqual(
          delivered.map((a) => a.i),
          Array.from({ length: 30 }, (_, i) => i),
          "in order",
        )
        assert.deepStrictEqual(
          delivered.map((a) => a.sequence),
          Array.from({ length: 30 }, (_, i) => i + 1),
        )
        const rows = yield* TestWebhooks.deliveries(sub.id)
        assert.isTrue(rows.every((d) => d.state === "delivered"))
      }).pipe(Effect.scoped, Effect.provide(TestClock.layer())),
    60_000,
  )

  it.effect(
    "WebhookRateLimitHeld: an update applies from the drainer's next read without a restart; a limit below one a second snoozes the job between requests",
    () =>
      Effect.gen(function* () {
        yield* TestClock.setTime(Date.now())
        const { receiver, arrivals } = yield* clockedReceiver(() => 200)
        const sub = yield* TestWebhooks.subscribe("owner-rate", receiver.url("/update"), ["rate-b"])
        for (let i = 0; i < 6; i++) yield* TestWebhooks.append("rate-b", { i })
        yield* TestWebhooks.round()
        const paced = yield* Queue.unbounded<Duration.Duration>()
        const [kind] = yield* signalledKinds(1, paced, 3)
        const info = yield* TestWebhooks.drainJob(sub.id)
        // No limit: the first run's three requests go out at once (the clock does not move).
        const first = yield* runOnce(kind!, sub.id, info)
        assert.isDefined(first, "the run bound: 3 steps")
        assert.strictEqual(arrivals.length, 3)
        assert.deepStrictEqual(gaps(arrivals.map((a) => a.at)), [0, 0])
        // Half a request a second from now on, read with the next batch by the same drainer.
        yield* (yield* WebhookSubscriptions).update(sub.id, { rateLimit: 0.5 })
        const snoozes = yield* drainByHand([kind!], sub.id, info, paced)

        assert.deepStrictEqual(
          arrivals.map((a) => a.i),
          [0, 1, 2, 3, 4, 5],
        )
        const after = gaps(arrivals.slice(2).map((a) => a.at))
        assert.strictEqual(after.length, 3)
        for (const gap of after) assert.isAtLeast(gap, 2000, "2 s apart under 0.5 a second")
        assert.isTrue(
          snoozes.some((ms) => ms > 1000),
          `a wait over a second snoozes the job instead of sleeping in it: ${snoozes.join(", ")}`,
        )
      }).pipe(Effect.scoped, Effect.provide(TestClock.layer())),
    60_000,
  )

  it.effect(
    "WebhookExtraHeadersSent: the extra headers arrive and the signature still verifies with standardwebhooks; a row naming the signature's headers cannot replace them",
    () =>
      Effect.gen(function* () {
        const receiver = yield* WebhookReceiver.start(() => ({ status: 200 }))
        const sub = yield* TestWebhooks.subscribe("owner-headers", receiver.url("/headers"), ["hdr-a"])
        yield* (yield* WebhookSubscriptions).update(sub.id, { headers: { "X-Api-Key": "key-1", "x-tenant": "acme" } })
        const signals = yield* TestWebhooks.signals
        yield* TestWebhooks.startDrainers(signals)
        const verifier = new Webhook(Redacted.value(sub.secret))

        yield* TestWebhooks.append("hdr-a", { i: 0 })
        yield* TestWebhooks.round()
        const plain = yield* Queue.take(receiver.received)
        assert.strictEqual(plain.headers["x-api-key"], "key-1")
        assert.strictEqual(plain.headers["x-tenant"], "acme")
        verifier.verify(plain.body, plain.headers as Record<string, string>)

        // Validation refuses these names; a hand-written row is what could still hold them.
        const sql = yield* SqlClient.SqlClient
        const forged = {
          "webhook-id": "msg_forged",
          "webhook-timestamp": "1",
          "webhook-signature": "v1,Zm9yZ2Vk",
          "Webhook-Signature": "v1,Zm9yZ2VkMg==",
          "content-type": "text/plain",
          "x-smuggle": "a\r\nwebhook-id: msg_forged",
          "x-kept": "yes",
        }
        yield* sql`UPDATE webhook_subscriptions SET headers = ${JSON.stringify(forged)}::jsonb WHERE id = ${sub.id}::uuid`
        yield* TestWebhooks.append("hdr-a", { i: 1 })
        yield* TestWebhooks.round()
        const next = yield* Queue.take(receiver.received)
        assert.strictEqual(TestWebhooks.envelope(next).data.i, 1)
        verifier.verify(next.body, next.headers as Record<string, string>)
        assert.match(String(next.headers["webhook-id"]), /^msg_\d+_[0-9a-f-]+_2$/)
        assert.notInclude(String(next.headers["webhook-signature"]), "Zm9yZ2Vk")
        assert.notStrictEqual(next.headers["webhook-timestamp"], "1")
        assert.strictEqual(next.headers["content-type"], "application/json")
        assert.isUndefined(next.headers["x-smuggle"], "a value with CR/LF is not sent")
        assert.strictEqual(next.headers["x-kept"], "yes")
        yield* TestWebhooks.deliveredThrough(signals, sub.id, 1)
      }).pipe(Effect.scoped),
    60_000,
  )
})
