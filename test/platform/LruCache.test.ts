/**
 * The bounded cache against a model: after any sequence of reads and writes it holds exactly the
 * `max` most recently used keys (a read of a present key counts as a use), each with its last value.
 */
import { assert, describe, it } from "@effect/vitest"
import fc from "fast-check"
import { LruCache } from "../../src/platform/LruCache.ts"

type Op =
  | { readonly kind: "get"; readonly key: number }
  | { readonly kind: "set"; readonly key: number; readonly value: number }

const op: fc.Arbitrary<Op> = fc.oneof(
  fc.record({ kind: fc.constant("get" as const), key: fc.integer({ min: 0, max: 9 }) }),
  fc.record({ kind: fc.constant("set" as const), key: fc.integer({ min: 0, max: 9 }), value: fc.integer() }),
)

describe("LruCache", () => {
  it("LruCacheKeepsTheMostRecentlyUsed: matches a model over any sequence of reads and writes", () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 5 }), fc.array(op, { maxLength: 60 }), (max, ops) => {
        const cache = new LruCache<number, number>(max)
        // The model: keys from least to most recently used, and their values.
        let order: Array<number> = []
        const values = new Map<number, number>()
        for (const o of ops) {
          if (o.kind === "get") {
            const got = cache.get(o.key)
            assert.strictEqual(got, order.includes(o.key) ? values.get(o.key) : undefined)
            if (order.includes(o.key)) order = [...order.filter((k) => k !== o.key), o.key]
          } else {
            cache.set(o.key, o.value)
            values.set(o.key, o.value)
            order = [...order.filter((k) => k !== o.key), o.key]
            if (order.length > max) order = order.slice(order.length - max)
          }
          assert.strictEqual(cache.size, order.length)
        }
        for (const k of order) assert.strictEqual(cache.get(k), values.get(k))
      }),
    )
  })

  it("LruCacheMakesOnce: getOrSet calls make only for an absent key", () => {
    const cache = new LruCache<string, number>(2)
    let made = 0
    const make = () => ++made
    assert.strictEqual(cache.getOrSet("a", make), 1)
    assert.strictEqual(cache.getOrSet("a", make), 1)
    assert.strictEqual(cache.getOrSet("b", make), 2)
    assert.strictEqual(cache.getOrSet("c", make), 3) // drops "a"
    assert.strictEqual(cache.getOrSet("a", make), 4)
    assert.strictEqual(made, 4)
  })
})
