/**
 * An attempt's plan must keep on record every registration it found dead, whatever else the
 * attempt met: a snooze records nothing, so a batch that both lost a registration and was
 * throttled by one push service ends as dead and sends the throttled ones in a job of their own.
 *
 * And a batch whose every registration settled writes no progress before its outcome
 * (`PushProgress`): that is sound only if such a plan always ends the job, keeping nothing.
 */
import { assert, describe, it } from "@effect/vitest"
import { Duration } from "effect"
import fc from "fast-check"
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

  it("PushBatchAllSettledEndsTheJob: whatever happened to each registration, all settled means nothing left, and the plan ends the job keeping nothing", () => {
    const step = fc.tuple(
      fc.constantFrom("settle", "die", "fail", "throttle"),
      fc.integer({ min: 0, max: 5 }),
      fc.constantFrom("https://a.example", "https://b.example"),
    )
    fc.assert(
      fc.property(
        fc.array(fc.integer({ min: 0, max: 5 }), { minLength: 1, maxLength: 6 }),
        fc.array(step, { maxLength: 20 }),
        (ids, steps) => {
          const registrations = ids.map(String)
          const ledger = new Ledger(registrations, { "9": "dead in an earlier attempt" })
          for (const [what, n, origin] of steps) {
            const r = registrations[n % registrations.length]!
            if (what === "settle") ledger.settle(r)
            else if (what === "die") ledger.die(r, "refused")
            else if (what === "fail") ledger.fail(r, "503")
            else ledger.throttle(origin, r, Duration.seconds(5))
          }
          assert.strictEqual(ledger.allSettled(), ledger.left().length === 0)
          if (ledger.allSettled()) {
            const plan = ledger.plan(Duration.minutes(1))
            assert.deepStrictEqual([plan.keep, plan.split], [[], []])
            assert.include(["Done", "Dead"], plan.next._tag)
          }
        },
      ),
    )
  })
})
