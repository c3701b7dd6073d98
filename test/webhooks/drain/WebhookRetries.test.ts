import { assert, layer } from "@effect/vitest"
import { Clock, Duration, Effect } from "effect"
import { TestClock } from "effect/testing"
import * as WebhookDrainer from "../../../src/webhooks/drain/WebhookDrainer.ts"
import { WebhookSubscriptions } from "../../../src/webhooks/subscriptions/WebhookSubscriptions.ts"
import * as WebhookReceiver from "../../../testkit/WebhookReceiver.ts"
import * as TestWebhooks from "../../support/TestWebhooks.ts"

const Live = TestWebhooks.layer()

/**
 * A subscription with one event to deliver, under the TestClock. `attempt()` runs the round's drain
 * job once, as the job runtime would (same job id each time, so it keeps the subscription's slot), and returns when it asks to run again (its snooze), or `undefined`
 * when it is done. Driving the job directly keeps the clock still while an attempt runs; the job
 * runtime's own handling of a snooze is tested with the runtime.
 */
const setup = (path: string, space: string, answer: (n: number) => WebhookReceiver.Answer) =>
  Effect.gen(function* () {
    yield* TestClock.setTime(Date.now())
    let n = 0
    const receiver = yield* WebhookReceiver.start(() => answer(++n))
    const sub = yield* TestWebhooks.subscribe("owner-t", receiver.url(path), [space])
    yield* TestWebhooks.append(space)
    yield* TestWebhooks.round()
    const info = yield* TestWebhooks.drainJob(sub.id)
    // Run by hand under the TestClock: a drainer that runs dry lets go at once rather than linger on
    // a clock nothing moves.
    const kind = yield* WebhookDrainer.makeWith({ linger: 0 })
    const attempt = kind.run({ subscription: sub.id }, info).pipe(
      Effect.as(undefined),
      Effect.catchTag("JobSnooze", (snooze) => Effect.succeed(snooze.delay)),
    )
    const subState = Effect.map((yield* WebhookSubscriptions).get(sub.id), (s) => [s.state, s.disabledCause] as const)
    return { sub, attempt, subState, requests: () => n }
  })

const minutes = (m: number) => m * 60_000

layer(Live, { excludeTestServices: true })("Webhook retries", (it) => {
  it.effect(
    "WebhookRetryScheduleWithTestClock: the delivery comes back on the schedule, with the 429 floor and the Retry-After clamp",
    () =>
      Effect.gen(function* () {
        const answers: ReadonlyArray<WebhookReceiver.Answer> = [
          { status: 500 },
          { status: 429 },
          { status: 503, headers: { "retry-after": "1000" } },
          { status: 503, headers: { "retry-after": String(60 * 60 * 10) } },
          { status: 200 },
        ]
        const { attempt, requests } = yield* setup("/schedule", "sched-a", (n) => answers[n - 1]!)
        const ahead = Effect.map(attempt, (delay) => (delay === undefined ? undefined : Duration.toMillis(delay)))
        const first = (yield* ahead)!
        assert.isAtLeast(first, 4_000, "5 s -20 %")
        assert.isAtMost(first, 6_000, "5 s +20 %")
        yield* TestClock.adjust(Duration.millis(first))
        // A 429 after attempt 2: the 5 min step (±20 %) is above the 60 s floor.
        const second = (yield* ahead)!
        assert.isAtLeast(second, minutes(4))
        assert.isAtMost(second, minutes(6))
        yield* TestClock.adjust(Duration.millis(second))
        // Retry-After 1000 s after attempt 3, whose step is 30 min: clamped up to the step.
        const third = (yield* ahead)!
        assert.strictEqual(third, minutes(30))
        yield* TestClock.adjust(Duration.millis(third))
        // Retry-After 10 h after attempt 4, whose step is 2 h: clamped down to twice the step.
        const fourth = (yield* ahead)!
        assert.strictEqual(fourth, minutes(240))
        yield* TestClock.adjust(Duration.millis(fourth))
        assert.isUndefined(yield* ahead, "delivered: nothing more to do")
        assert.strictEqual(requests(), 5)
      }).pipe(Effect.scoped, Effect.provide(TestClock.layer())),
    60_000,
  )

  it.effect(
    "WebhookFailingForFiveDaysDisables: every attempt failing for 5 days disables the subscription with cause failing",
    () =>
      Effect.gen(function* () {
        const { attempt, subState, requests } = yield* setup("/failing", "fail-a", () => ({ status: 500 }))
        const start = yield* Clock.currentTimeMillis
        for (;;) {
          const delay = yield* attempt
          const elapsed = (yield* Clock.currentTimeMillis) - start
          if (delay === undefined) {
            assert.deepStrictEqual(yield* subState, ["disabled", "failing"])
            assert.isAtLeast(elapsed, 5 * 24 * 3_600_000, "not before 5 days")
            break
          }
          assert.deepStrictEqual(yield* subState, ["active", null])
          assert.isBelow(elapsed, 5 * 24 * 3_600_000, "every attempt before the fifth day keeps it active")
          yield* TestClock.adjust(delay)
        }
        assert.isAtLeast(requests(), 15, "the head was retried every 10 h after the first steps")
      }).pipe(Effect.scoped, Effect.provide(TestClock.layer())),
    60_000,
  )
})
