import { assert, describe, it } from "@effect/vitest"
import { Duration } from "effect"
import * as WebhookSchedule from "../../../src/webhooks/drain/WebhookSchedule.ts"

const failure = (attempt: number, extra: Partial<WebhookSchedule.Failure> = {}): WebhookSchedule.Failure => ({
  attempt,
  status: 500,
  errorClass: undefined,
  retryAfter: undefined,
  now: Date.UTC(2026, 10, 30),
  ...extra,
})

const ms = (d: Duration.Duration) => Duration.toMillis(d)
const stepsMs = [5_000, 300_000, 1_800_000, 7_200_000, 18_000_000, 36_000_000, 36_000_000]

describe("WebhookSchedule", () => {
  it("WebhookRetryScheduleWithTestClock (schedule): 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h, then every 10 h", () => {
    const mid = () => 0.5 // no jitter
    for (let attempt = 1; attempt <= 12; attempt++) {
      assert.strictEqual(ms(WebhookSchedule.nextDelay(failure(attempt), mid)), stepsMs[attempt - 1] ?? 36_000_000)
    }
  })

  it("WebhookRetryScheduleWithTestClock (jitter bounds): within ±20 % of the step, reaching both ends", () => {
    for (let attempt = 1; attempt <= 8; attempt++) {
      const step = stepsMs[attempt - 1] ?? 36_000_000
      assert.strictEqual(ms(WebhookSchedule.nextDelay(failure(attempt), () => 0)), Math.round(step * 0.8))
      assert.strictEqual(ms(WebhookSchedule.nextDelay(failure(attempt), () => 0.999999)), Math.round(step * 1.199999_6))
      for (let i = 0; i < 50; i++) {
        const d = ms(WebhookSchedule.nextDelay(failure(attempt)))
        assert.isAtLeast(d, step * 0.8)
        assert.isAtMost(d, step * 1.2)
      }
    }
  })

  it("WebhookRetryScheduleWithTestClock (429 floor): a 429 or a timeout waits at least 60 s", () => {
    assert.strictEqual(ms(WebhookSchedule.nextDelay(failure(1, { status: 429 }), () => 0.5)), 60_000)
    assert.strictEqual(
      ms(WebhookSchedule.nextDelay(failure(1, { status: undefined, errorClass: "timeout" }), () => 0.5)),
      60_000,
    )
    // Above the floor already: the step stands.
    assert.strictEqual(ms(WebhookSchedule.nextDelay(failure(2, { status: 429 }), () => 0.5)), 300_000)
  })

  it("WebhookRetryScheduleWithTestClock (Retry-After clamp): honoured within [step, 2 × step]", () => {
    const at = (retryAfter: string, attempt = 2) =>
      ms(WebhookSchedule.nextDelay(failure(attempt, { status: 503, retryAfter }), () => 0.5))
    assert.strictEqual(at("450"), 450_000, "inside the window: as asked")
    assert.strictEqual(at("10"), 300_000, "too soon: the step")
    assert.strictEqual(at("86400"), 600_000, "too late: twice the step")
    const now = failure(2).now
    assert.strictEqual(at(new Date(now + 420_000).toUTCString()), 420_000, "an HTTP date")
    assert.strictEqual(at("soon"), 300_000, "unreadable: ignored (the step, without jitter here)")
    // 429 with Retry-After below the floor still waits 60 s.
    assert.strictEqual(ms(WebhookSchedule.nextDelay(failure(1, { status: 429, retryAfter: "1" }), () => 0.5)), 60_000)
  })

  it("the failing clock counts from the first failure once a failure came 12 h later, and disables after 5 days", () => {
    const h = 3_600_000
    const t0 = Date.UTC(2026, 0, 1)
    let clock: WebhookSchedule.FailingClock = { firstAt: null, clockAt: null }
    let next = WebhookSchedule.afterFailure(clock, t0)
    assert.deepStrictEqual(next, { firstAt: t0, clockAt: null, disable: false })
    // One failure, then nothing for 6 days, then one more: confirmed, and over 5 days.
    next = WebhookSchedule.afterFailure({ firstAt: t0, clockAt: null }, t0 + 11 * h)
    assert.deepStrictEqual(next, { firstAt: t0, clockAt: null, disable: false })
    next = WebhookSchedule.afterFailure(next, t0 + 12 * h)
    assert.deepStrictEqual(next, { firstAt: t0, clockAt: t0, disable: false })
    clock = next
    assert.isFalse(WebhookSchedule.afterFailure(clock, t0 + 120 * h - 1).disable)
    assert.isTrue(WebhookSchedule.afterFailure(clock, t0 + 120 * h).disable)
  })

  it("the disable window plus the longest step is what the retention must exceed", () => {
    assert.strictEqual(ms(WebhookSchedule.longestFailingSpan), 5 * 86_400_000 + 10 * 3_600_000)
  })
})
