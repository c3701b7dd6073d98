import { assert, describe, it } from "@effect/vitest"
import { nextSize } from "../../../src/webhooks/drain/Drain.ts"
import { boundReached, mustReadAgain, readsAlong } from "../../../src/webhooks/drain/DrainStep.ts"

const settings = { readAhead: 4, maxReadAhead: 64, maxAgeMillis: 1000 }

const checked = (extra: { sendable?: boolean; sequence?: bigint | null; allowed?: boolean; exempt?: boolean }) => ({
  delivery: { sendable: extra.sendable ?? true, sequence: extra.sequence === undefined ? 1n : extra.sequence },
  allowed: extra.allowed ?? true,
  exempt: extra.exempt ?? false,
  checkedAt: 10_000,
})

describe("DrainStep", () => {
  it("DrainReadAheadSize: doubles while reads come back full, up to maxReadAhead; back to readAhead after one that was not", () => {
    assert.strictEqual(nextSize(settings, undefined, 4, 4), 8)
    assert.strictEqual(nextSize(settings, undefined, 32, 32), 64)
    assert.strictEqual(nextSize(settings, undefined, 64, 64), 64)
    assert.strictEqual(nextSize(settings, undefined, 64, 63), 4)
    assert.strictEqual(nextSize(settings, undefined, 8, 0), 4)
  })

  it("DrainReadAheadSize (slow endpoint): no more than can go out within half the age bound at the last pace, at least one", () => {
    // 1000 ms bound, half is 500 ms: at 50 ms a request, 10 fit.
    assert.strictEqual(nextSize(settings, 50, 32, 32), 10)
    assert.strictEqual(nextSize(settings, 50, 4, 4), 8)
    assert.strictEqual(nextSize(settings, 400, 64, 64), 1)
    assert.strictEqual(nextSize(settings, 0, 64, 64), 64, "an instant answer counts as 1 ms")
  })

  it("DrainReadAgain: a delivery checked longer ago than the bound, or to be sent without a number, is read again first", () => {
    assert.isFalse(mustReadAgain(checked({}), 11_000, 1000), "exactly at the bound")
    assert.isTrue(mustReadAgain(checked({}), 11_001, 1000), "past the bound")
    assert.isFalse(mustReadAgain(checked({ exempt: true }), 60_000, 1000), "the first of a read the run waited for")
    assert.isTrue(mustReadAgain(checked({ sequence: null }), 10_000, 1000), "renumbered by another run")
    assert.isFalse(
      mustReadAgain(checked({ sequence: null, allowed: false }), 10_000, 1000),
      "not to be sent: no number needed",
    )
    assert.isFalse(mustReadAgain(checked({ sequence: null, sendable: false }), 10_000, 1000), "settled, not sent")
  })

  it("DrainReadAlong: the next read goes alongside the request only when nothing is read ahead, more may be pending, and the endpoint is fast enough", () => {
    const drain = { lingers: true, maxAgeMillis: 1000 }
    const run = { queue: [], full: false, lastRequestMillis: 100 }
    assert.isFalse(readsAlong(drain, run, false), "caught up, no news: wait for news instead")
    assert.isTrue(readsAlong(drain, run, true), "a round reported news")
    assert.isTrue(readsAlong(drain, { ...run, full: true }, false), "the last read was full")
    assert.isTrue(readsAlong({ ...drain, lingers: false }, run, false), "no linger: always")
    assert.isFalse(readsAlong(drain, { ...run, queue: [checked({})] }, true), "something is read ahead")
    assert.isTrue(readsAlong(drain, { ...run, lastRequestMillis: 500 }, true), "at half the bound")
    assert.isFalse(readsAlong(drain, { ...run, lastRequestMillis: 501 }, true), "too slow: read after the answer")
    assert.isTrue(readsAlong(drain, { ...run, lastRequestMillis: undefined }, true), "no request yet")
  })

  it("DrainRunBound: a run snoozes once it took maxDeliveriesPerRun steps or ran maxRunTime", () => {
    const drain = { maxDeliveries: 500, maxRunMillis: 5000 }
    assert.isFalse(boundReached(drain, { steps: 499, start: 0 }, 4999))
    assert.isTrue(boundReached(drain, { steps: 500, start: 0 }, 0))
    assert.isTrue(boundReached(drain, { steps: 0, start: 1000 }, 6000))
  })
})
