/**
 * An attempt's plan must keep on record every registration it found dead, whatever else the
 * attempt met: a snooze records nothing, so a batch that both lost a registration and was
 * throttled by one push service ends as dead and sends the throttled ones in a job of their own.
 */
import { assert, describe, it } from "@effect/vitest"
import { Duration } from "effect"
import { Ledger } from "../../src/push/PushBatch.ts"

describe("PushBatch.Ledger", () => {
  it("PushBatchThrottleKeepsDeathsOnRecord: a death beside one throttled push service is named, the throttled ones split off", () => {
    const ledger = new Ledger(["1", "2", "3"])
    ledger.die("1", "user:ann lacks push.deliver on space s")
    ledger.throttle("https://push.example", "2", Duration.seconds(5))
    ledger.settle("3")
    const plan = ledger.plan(Duration.minutes(1))
    assert.deepStrictEqual(plan.keep, [])
    assert.deepStrictEqual(
      plan.split.map((s) => [s.registrations, Duration.toMillis(s.delay)]),
      [[["2"], 5000]],
    )
    assert.strictEqual(plan.next._tag, "Dead")
    assert.include(plan.next._tag === "Dead" ? plan.next.reason : "", "registration 1: user:ann lacks push.deliver")
  })

  it("PushBatchThrottleKeepsDeathsOnRecord: with nobody dead, one throttled push service snoozes the job", () => {
    const ledger = new Ledger(["1", "2"])
    ledger.throttle("https://push.example", "1", Duration.seconds(5))
    ledger.settle("2")
    const plan = ledger.plan(Duration.minutes(1))
    assert.deepStrictEqual(plan, { keep: ["1"], split: [], next: { _tag: "Snooze", delay: Duration.seconds(5) } })
  })
})
