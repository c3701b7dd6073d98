/**
 * Payload filters and event-type patterns, as the `webhooks` round applies them: the round's SQL
 * agrees with a reference evaluator written from the documented semantics (both the one-statement
 * round and the transactional one), bad filters are refused naming their path, and patterns match
 * at segment boundaries.
 */
import { assert, layer } from "@effect/vitest"
import { Effect, Exit, type Schema } from "effect"
import { SqlClient } from "effect/sql"
import fc from "fast-check"
import * as Consumer from "../../../src/consumer/Consumer.ts"
import { matches } from "../../../src/webhooks/subscriptions/EventTypePatterns.ts"
import type { Filter, Scalar } from "../../../src/webhooks/subscriptions/PayloadFilter.ts"
import { WebhookSubscriptions } from "../../../src/webhooks/subscriptions/WebhookSubscriptions.ts"
import * as WebhookFanOut from "../../../src/webhooks/WebhookFanOut.ts"
import { evaluate } from "../../support/PayloadFilterReference.ts"
import * as TestWebhooks from "../../support/TestWebhooks.ts"

const url = "https://8.8.8.8/hook"

/** The transactional round alone (no one-statement round first). */
const { oneStatement: _, ...transactionalOptions } = WebhookFanOut.roundOptions({ batchSize: 10_000 })
const transactionalRound = Effect.flatMap(Consumer.makeRound(transactionalOptions), (r) => r)

const deliveredSeqs = (subscription: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{
      seq: bigint
    }>`SELECT event_seq AS seq FROM webhook_deliveries WHERE subscription_id = ${subscription}::uuid`.pipe(
      Effect.map((rows) => new Set(rows.map((r) => r.seq))),
    ),
  )

const keys = ["a", "b", "x y", "é"] as const
const scalars: ReadonlyArray<Scalar> = [0, 1, 2, -1.5, 100, 1e21, "", "a", "ab", "b", "é", "😀", "ﬀ", true, false, null]
const scalar = fc.constantFrom(...scalars)

const json: fc.Arbitrary<Schema.Json> = fc.letrec<{ value: Schema.Json }>((tie) => ({
  value: fc.oneof(
    { depthSize: "small", withCrossShrink: true },
    scalar,
    fc.array(tie("value"), { maxLength: 3 }),
    fc.dictionary(fc.constantFrom(...keys), tie("value"), { maxKeys: 3 }),
  ),
})).value

const step = (key: string) => (/^[A-Za-z_]\w*$/.test(key) ? `.${key}` : `[${JSON.stringify(key)}]`)
const path = fc.array(fc.constantFrom(...keys), { maxLength: 3 }).map((names) => `$${names.map(step).join("")}`)
const bound = fc.constantFrom(...scalars.filter((s) => typeof s === "number" || typeof s === "string"))

const leaf: fc.Arbitrary<Filter> = fc.oneof(
  fc.record({ path, eq: scalar }),
  fc.record({ path, in: fc.array(scalar, { minLength: 1, maxLength: 3 }) }),
  fc.record({ path, exists: fc.boolean() }),
  fc.record({ path, gt: bound }),
  fc.record({ path, gte: bound }),
  fc.record({ path, lt: bound }),
  fc.record({ path, lte: bound }),
  fc.record({ path, startsWith: fc.constantFrom("", "a", "é", "😀") }),
)

const filter: fc.Arbitrary<Filter> = fc.letrec<{ f: Filter }>((tie) => ({
  f: fc.oneof(
    { depthSize: "small", maxDepth: 3 },
    leaf,
    fc.record({ and: fc.array(tie("f"), { minLength: 1, maxLength: 3 }) }),
    fc.record({ or: fc.array(tie("f"), { minLength: 1, maxLength: 3 }) }),
    fc.record({ not: tie("f") }),
  ),
})).f

const refusal = (exit: Exit.Exit<unknown, unknown>) =>
  Exit.isFailure(exit) && exit.cause.reasons[0]?._tag === "Fail"
    ? (exit.cause.reasons[0].error as { _tag?: string; field?: string })
    : undefined

layer(TestWebhooks.layer(), { excludeTestServices: true })("SubscriptionFilters", (it) => {
  it.effect("FilterMatchesInRound: the round's SQL agrees with a reference evaluator on generated filters", () =>
    Effect.gen(function* () {
      const context = yield* Effect.context<TestWebhooks.Services>()
      let run = 0
      const tally = { matched: 0, unmatched: 0 }
      yield* Effect.promise(() =>
        fc.assert(
          fc.asyncProperty(filter, fc.array(json, { minLength: 1, maxLength: 8 }), async (f, payloads) => {
            const space = `filter-${run++}`
            const check = Effect.gen(function* () {
              const { id } = yield* TestWebhooks.subscribe("filter-owner", url, [space], [], f)
              const expected = new Set<bigint>()
              for (const payload of payloads) {
                const appended = yield* TestWebhooks.append(space, payload)
                if (evaluate(f, payload)) expected.add(appended.firstSeq)
              }
              tally.matched += expected.size
              tally.unmatched += payloads.length - expected.size
              yield* run % 2 === 0 ? TestWebhooks.round() : transactionalRound
              const got = yield* deliveredSeqs(id)
              assert.deepStrictEqual([...got].sort(), [...expected].sort(), JSON.stringify({ f, payloads }))
            })
            await Effect.runPromise(Effect.provideContext(check, context))
          }),
          { numRuns: 150 },
        ),
      )
      // The generated cases exercise both outcomes, not only one.
      assert.isAbove(tally.matched, 50, JSON.stringify(tally))
      assert.isAbove(tally.unmatched, 50, JSON.stringify(tally))
    }),
  )

  it.effect(
    "FilterRejectsBadExpressions: a bad filter is an InvalidSubscription naming its path; nothing is written",
    () =>
      Effect.gen(function* () {
        const subscriptions = yield* WebhookSubscriptions
        const sql = yield* SqlClient.SqlClient
        const create = (f: unknown) =>
          Effect.map(
            Effect.exit(
              subscriptions.create({
                owner: "bad-filter",
                url,
                eventTypes: [],
                scope: ["s"],
                filter: f as Schema.Json,
              }),
            ),
            refusal,
          )
        const cases: ReadonlyArray<readonly [unknown, string]> = [
          ["status", "filter"],
          [{ path: "status", eq: 1 }, "filter.path"],
          [{ path: "$.a..b", eq: 1 }, "filter.path"],
          [{ path: "$.a", eq: [1] }, "filter.eq"],
          [{ path: "$.a", eq: 1, gt: 2 }, "filter"],
          [{ path: "$.a" }, "filter"],
          [{ path: "$.a", like: "x%" }, "filter.like"],
          [{ and: [] }, "filter.and"],
          [
            {
              and: [
                { path: "$.a", eq: 1 },
                { path: "$.b", in: [] },
              ],
            },
            "filter.and[1].in",
          ],
          [{ or: [{ not: { path: "$.a", gt: true } }] }, "filter.or[0].not.gt"],
          [{ not: { path: "$.a", in: [1, { x: 1 }] } }, "filter.not.in[1]"],
          [{ and: [{ path: "$.a", exists: true }], path: "$.b" }, "filter"],
          [{ path: "$.a", startsWith: 1 }, "filter.startsWith"],
          [{ path: "$.a", eq: "\u0000" }, "filter.eq"],
          [
            { not: { not: { not: { not: { not: { not: { not: { not: { path: "$", exists: true } } } } } } } } },
            "filter.not.not.not.not.not.not.not.not",
          ],
        ]
        for (const [input, field] of cases) {
          const error = yield* create(input)
          assert.strictEqual(error?._tag, "InvalidSubscription", JSON.stringify(input))
          assert.strictEqual(error?.field, field, JSON.stringify(input))
        }
        const [{ n }] = (yield* sql<{
          n: number
        }>`SELECT count(*)::int AS n FROM webhook_subscriptions WHERE owner = 'bad-filter'`) as [{ n: number }]
        assert.strictEqual(n, 0, "nothing written")

        const { id } = yield* subscriptions.create({ owner: "bad-filter", url, eventTypes: [], scope: ["s"] })
        const updated = refusal(yield* Effect.exit(subscriptions.update(id, { filter: { or: [{ path: "$.a" }] } })))
        assert.deepStrictEqual([updated?._tag, updated?.field], ["InvalidSubscription", "filter.or[0]"])
        assert.strictEqual((yield* subscriptions.get(id)).filter, null, "the update wrote nothing")
      }),
  )

  it.effect("EventTypePatternsMatch: exact types, order.* at segment boundaries, * for all, _ taken literally", () =>
    Effect.gen(function* () {
      const names = ["order.*", "*", "a_b.created", "order.item.*"]
      const types = ["order.created", "order.item.added", "orders.created", "order", "a_b.created", "aXb.created"]
      const subs = yield* Effect.forEach(names, (name) =>
        TestWebhooks.subscribe("pattern-owner", url, ["patterns"], [name]),
      )
      const seqs = yield* Effect.forEach(types, (type) =>
        Effect.map(TestWebhooks.append("patterns", {}, type), (a) => a.firstSeq),
      )
      yield* TestWebhooks.round()
      for (const [i, name] of names.entries()) {
        const got = yield* deliveredSeqs(subs[i]!.id)
        const expected = types.flatMap((type, j) => (matches(name, type) ? [seqs[j]!] : []))
        assert.deepStrictEqual([...got].sort(), expected.sort(), name)
      }
      assert.deepStrictEqual(
        types.filter((t) => matches("order.*", t)),
        ["order.created", "order.item.added"],
      )
      const subscriptions = yield* WebhookSubscriptions
      for (const [bad, at] of [
        ["order*", "eventTypes[0]"],
        ["*.created", "eventTypes[0]"],
        ["order.*.x", "eventTypes[0]"],
      ] as const) {
        const error = refusal(
          yield* Effect.exit(subscriptions.create({ owner: "p", url, eventTypes: [bad], scope: ["s"] })),
        )
        assert.deepStrictEqual([error?._tag, error?.field], ["InvalidSubscription", at], bad)
      }
    }),
  )

  it.effect("a changed filter applies from the next round on", () =>
    Effect.gen(function* () {
      const subscriptions = yield* WebhookSubscriptions
      const { id } = yield* TestWebhooks.subscribe("change-owner", url, ["change"], [], { path: "$.n", gt: 1 })
      const first = yield* TestWebhooks.append("change", { n: 1 })
      const second = yield* TestWebhooks.append("change", { n: 2 })
      yield* TestWebhooks.round()
      yield* subscriptions.update(id, { filter: { path: "$.n", lt: 2 } })
      const third = yield* TestWebhooks.append("change", { n: 1 })
      yield* TestWebhooks.append("change", { n: 2 })
      yield* TestWebhooks.round()
      yield* subscriptions.update(id, { filter: null })
      const fifth = yield* TestWebhooks.append("change", { other: true })
      yield* TestWebhooks.round()
      assert.deepStrictEqual([...(yield* deliveredSeqs(id))].sort(), [second.firstSeq, third.firstSeq, fifth.firstSeq])
      assert.notInclude([...(yield* deliveredSeqs(id))], first.firstSeq)
      assert.strictEqual((yield* subscriptions.get(id)).filter, null)
    }),
  )
})
