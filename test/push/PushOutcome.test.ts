import { assert, describe, it } from "@effect/vitest"
import { Duration } from "effect"
import type { SendResult } from "../../src/outbound/OutboundSender.ts"
import * as PushEnvelope from "../../src/push/PushEnvelope.ts"
import * as PushOutcome from "../../src/push/PushOutcome.ts"
import * as PushSchedule from "../../src/push/PushSchedule.ts"

const answer = (status: number | undefined, extra: Partial<SendResult> = {}): SendResult => ({
  status,
  errorClass: undefined,
  body: "",
  truncated: false,
  durationMs: 1,
  retryAfter: undefined,
  ...extra,
})

describe("PushOutcome", () => {
  it("PushOutcomeByStatus: 2xx delivered, 404/410 gone, 413 dead, 429 throttled, 5xx and network retried, 400/401/403 configuration errors, other 4xx and redirects rejected, refused addresses blocked", () => {
    const tag = (r: SendResult) => {
      const v = PushOutcome.classify(r, 0)
      return v._tag === "Dead" ? `Dead:${v.outcome}` : v._tag
    }
    assert.deepStrictEqual(
      [201, 202, 200].map((s) => tag(answer(s))),
      ["Delivered", "Delivered", "Delivered"],
    )
    assert.deepStrictEqual(
      [404, 410].map((s) => tag(answer(s))),
      ["Gone", "Gone"],
    )
    assert.strictEqual(tag(answer(413)), "Dead:payload_too_large")
    assert.strictEqual(tag(answer(429)), "Throttled")
    assert.deepStrictEqual(
      [500, 502, 503].map((s) => tag(answer(s))),
      ["Retry", "Retry", "Retry"],
    )
    for (const errorClass of ["dns", "connect", "tls", "timeout"] as const) {
      assert.strictEqual(tag(answer(undefined, { errorClass })), "Retry")
    }
    assert.deepStrictEqual(
      [400, 401, 403].map((s) => tag(answer(s))),
      ["Dead:config_error", "Dead:config_error", "Dead:config_error"],
    )
    assert.strictEqual(tag(answer(405)), "Dead:rejected")
    assert.strictEqual(tag(answer(301, { errorClass: "redirect" })), "Dead:rejected")
    assert.strictEqual(
      tag(answer(undefined, { errorClass: "blocked_ip", refusal: "private: 10.0.0.1" })),
      "Dead:blocked",
    )
  })

  it("PushThrottleFollowsRetryAfter: seconds or an HTTP date; a minute when absent or unreadable", () => {
    const delay = (retryAfter: string | undefined, now = 0) => {
      const v = PushOutcome.classify(answer(429, { retryAfter }), now)
      return v._tag === "Throttled" ? Duration.toMillis(v.delay) : Number.NaN
    }
    assert.strictEqual(delay("30"), 30_000)
    const now = Date.parse("2026-12-02T00:00:00Z")
    assert.strictEqual(delay("Wed, 02 Dec 2026 00:02:00 GMT", now), 120_000)
    assert.strictEqual(delay(undefined), 60_000)
    assert.strictEqual(delay("soon"), 60_000)
  })
})

describe("PushSchedule", () => {
  it("PushRetryScheduleCoversTheTtl: 10 s, 60 s, then every 5 min; enough attempts to keep retrying for the whole TTL", () => {
    assert.deepStrictEqual(
      [1, 2, 3, 4, 50].map((a) => Duration.toMillis(PushSchedule.retryDelay(a))),
      [10_000, 60_000, 300_000, 300_000, 300_000],
    )
    for (const ttl of [Duration.zero, Duration.minutes(1), Duration.days(1), Duration.weeks(4)]) {
      const attempts = PushSchedule.maxAttempts(ttl)
      let spent = 0
      for (let a = 1; a < attempts; a++) spent += Duration.toMillis(PushSchedule.retryDelay(a))
      assert.isAtLeast(spent, Duration.toMillis(ttl), `attempts for ${Duration.format(ttl)}`)
    }
    assert.strictEqual(PushSchedule.maxAttempts(Duration.days(1)), 3 + Math.ceil((86_400 - 370) / 300) + 1)
  })
})

describe("PushEnvelope", () => {
  const base = {
    key: "push_2_7_42",
    type: "item.created",
    space: "s1",
    epoch: 2,
    seq: 42n,
    occurredAt: new Date(0),
    summary: null,
  }

  it("PushEnvelopeIsCompact: type, space, the message's key as id and tag, the event id with its epoch, the time, and the payload's summary", () => {
    assert.deepStrictEqual(JSON.parse(PushEnvelope.body({ ...base, summary: "Anna added a card" })), {
      version: 2,
      type: "item.created",
      space: "s1",
      id: "push_2_7_42",
      tag: "push_2_7_42",
      event: "2.42",
      timestamp: "1970-01-01T00:00:00.000Z",
      summary: "Anna added a card",
    })
    assert.isUndefined(JSON.parse(PushEnvelope.body(base)).summary)
  })

  it("PushEnvelopeFitsThreeThousandBytes: a long summary (ASCII, four-byte characters, escapes) is cut on a character boundary to fit", () => {
    for (const unit of ["a", "😀", "\u0001", "é"]) {
      const text = PushEnvelope.body({
        ...base,
        type: "t".repeat(200),
        space: "s".repeat(200),
        summary: unit.repeat(5000),
      })
      assert.isAtMost(Buffer.byteLength(text, "utf8"), PushEnvelope.maxBytes)
      const summary: string = JSON.parse(text).summary
      assert.isTrue(summary.endsWith("…"))
      assert.isAbove(summary.length, 100)
      assert.isTrue(
        Array.from(summary.slice(0, -1)).every((c) => c === unit),
        "no half character",
      )
    }
  })
})
