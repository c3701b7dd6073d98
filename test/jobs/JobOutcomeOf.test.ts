import { assert, describe, it } from "@effect/vitest"
import { Cause, Duration, Exit } from "effect"
import type { Outcome } from "../../src/jobs/JobFinalize.ts"
import { JobCancel, JobSnooze } from "../../src/jobs/JobKind.ts"
import { outcomeOf, retryOrDiscard } from "../../src/jobs/JobOutcome.ts"

const now = Date.UTC(2030, 0, 2, 3, 4, 5, 678)
const at = new Date(now).toISOString()
// A kind's retry delay that says which attempt asked: 1 s after attempt 1, 2 s after attempt 2, ...
const linear = (attempt: number) => Duration.seconds(attempt)
const first = { attempt: 1, maxAttempts: 3 }
const last = { attempt: 3, maxAttempts: 3 }

const retry = (job: { attempt: number }, kind: string, message: string): Outcome => ({
  _tag: "Retry",
  at: new Date(now + job.attempt * 1000),
  error: { attempt: job.attempt, at, kind: kind as "failure", message },
})

class Boom extends Error {}

describe("JobOutcome", () => {
  it("JobOutcomeOf: success completes the job", () => {
    assert.deepStrictEqual(outcomeOf(first, Exit.void, now, linear), { _tag: "Completed" })
  })

  it("JobOutcomeOf: JobCancel cancels it with the reason, on any attempt", () => {
    const exit = Exit.fail(new JobCancel({ reason: "permission revoked" }))
    const expected: Outcome = {
      _tag: "Cancelled",
      error: { attempt: 1, at, kind: "cancelled", message: "permission revoked" },
    }
    assert.deepStrictEqual(outcomeOf(first, exit, now, linear), expected)
    assert.strictEqual(outcomeOf(last, exit, now, linear)._tag, "Cancelled")
  })

  it("JobOutcomeOf: JobSnooze puts it off by its delay without spending the attempt, even the last", () => {
    const exit = Exit.fail(new JobSnooze({ delay: Duration.minutes(2) }))
    const expected: Outcome = { _tag: "Snooze", at: new Date(now + 120_000) }
    assert.deepStrictEqual(outcomeOf(first, exit, now, linear), expected)
    assert.deepStrictEqual(outcomeOf(last, exit, now, linear), expected)
  })

  it("JobOutcomeOf: a timeout is a failed attempt of kind timeout, retried after the kind's delay", () => {
    const exit = Exit.fail(new Cause.TimeoutError())
    assert.deepStrictEqual(
      outcomeOf(first, exit, now, linear),
      retry(first, "timeout", "the attempt exceeded its timeout"),
    )
  })

  it("JobOutcomeOf: a failure keeps the error's message, or the value's text when it is not an Error", () => {
    const second = { attempt: 2, maxAttempts: 3 }
    assert.deepStrictEqual(
      outcomeOf(second, Exit.fail(new Boom("upstream said 503")), now, linear),
      retry(second, "failure", "upstream said 503"),
    )
    assert.deepStrictEqual(
      outcomeOf(first, Exit.fail("plain text"), now, linear),
      retry(first, "failure", "plain text"),
    )
  })

  it("JobOutcomeOf: a defect is a failed attempt of kind defect, its message the pretty cause", () => {
    const cause = Cause.die(new Boom("null pointer"))
    const outcome = outcomeOf(first, Exit.failCause(cause), now, linear)
    assert.strictEqual(outcome._tag, "Retry")
    if (outcome._tag !== "Retry") return
    assert.strictEqual(outcome.error.kind, "defect")
    assert.strictEqual(outcome.error.message, Cause.pretty(cause))
    assert.include(outcome.error.message, "null pointer")
    assert.deepStrictEqual(outcome.at, new Date(now + 1000))
  })

  it("JobOutcomeOf: the last attempt discards instead of retrying, whatever the failure", () => {
    for (const [exit, kind] of [
      [Exit.fail(new Boom("still failing")), "failure"],
      [Exit.fail(new Cause.TimeoutError()), "timeout"],
      [Exit.die("boom"), "defect"],
    ] as const) {
      const outcome = outcomeOf(last, exit, now, linear)
      assert.strictEqual(outcome._tag, "Discarded", kind)
      if (outcome._tag === "Discarded") {
        assert.strictEqual(outcome.error.kind, kind)
        assert.strictEqual(outcome.error.attempt, 3)
      }
    }
    // Past the last (max_attempts lowered after the claim) discards too.
    assert.strictEqual(outcomeOf({ attempt: 4, maxAttempts: 3 }, Exit.fail("x"), now, linear)._tag, "Discarded")
  })

  it("JobOutcomeOf: the retry time is the kind's retryDelay of the failed attempt, from the worker's now", () => {
    const asked: Array<number> = []
    const delay = (attempt: number) => {
      asked.push(attempt)
      return Duration.millis(250 * 2 ** attempt)
    }
    const error = { attempt: 2, at, kind: "failure" as const, message: "m" }
    assert.deepStrictEqual(retryOrDiscard({ attempt: 2, maxAttempts: 5 }, error, now, delay), {
      _tag: "Retry",
      at: new Date(now + 1000),
      error,
    })
    assert.deepStrictEqual(asked, [2])
    // Discarding asks for no delay.
    retryOrDiscard({ attempt: 5, maxAttempts: 5 }, error, now, delay)
    assert.deepStrictEqual(asked, [2])
  })
})
