import { assert, layer } from "@effect/vitest"
import { Effect, Exit, Layer, Option, Queue } from "effect"
import { SqlClient } from "effect/sql"
import { TestClock } from "effect/testing"
import * as PushRegistrations from "../../src/push/PushRegistrations.ts"
import * as TestPush from "../support/TestPush.ts"

const count = Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => sql<{ n: number }>`SELECT count(*)::int AS n FROM push_registrations`,
)

layer(TestPush.layer(), { excludeTestServices: true })("PushRegistrations", (it) => {
  it.effect(
    "PushRegistrationRefreshes: the same endpoint registered again is one row, refreshed, under the principal who registered it last",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const subscription = TestPush.unheardSubscription()
        const first = yield* PushRegistrations.register("alice", subscription)
        assert.isTrue(first.created)
        yield* sql`UPDATE push_registrations SET refreshed_at = refreshed_at - interval '1 day' WHERE id = ${first.id}::bigint`
        const again = yield* PushRegistrations.register("bob", subscription)
        assert.strictEqual(again.id, first.id)
        assert.isFalse(again.created)
        const rows = yield* sql<{ principal: string; fresh: boolean }>`
        SELECT principal, refreshed_at > clock_timestamp() - interval '1 hour' AS fresh
        FROM push_registrations WHERE endpoint = ${subscription.endpoint}`
        assert.deepStrictEqual(rows, [{ principal: "bob", fresh: true }])
        assert.deepStrictEqual(
          (yield* PushRegistrations.list("bob")).map((r) => r.id),
          [first.id],
        )
        assert.deepStrictEqual(yield* PushRegistrations.list("alice"), [])
        assert.isTrue(yield* PushRegistrations.unregister(subscription.endpoint))
        assert.isFalse(yield* PushRegistrations.unregister(subscription.endpoint))
      }),
  )

  it.effect("PushRegistrationRefusesBadPrincipal: an empty principal is a typed error and stores nothing", () =>
    Effect.gen(function* () {
      const before = (yield* count)[0]!.n
      const exit = yield* Effect.exit(PushRegistrations.register("", TestPush.unheardSubscription()))
      assert.isTrue(Exit.isFailure(exit))
      assert.include(String(Exit.isFailure(exit) ? exit.cause : ""), "principal")
      assert.strictEqual((yield* count)[0]!.n, before)
    }),
  )
})

layer(TestPush.layer(), { excludeTestServices: true })("PushRegistrations sweep", (it) => {
  it.effect(
    "PushStaleRegistrationsExpire: the sweep runs every hour by the Clock and removes registrations not refreshed for push.registration_max_age (60 days), keeping fresher ones",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const stale = yield* PushRegistrations.register("alice", TestPush.unheardSubscription())
        const nearly = yield* PushRegistrations.register("alice", TestPush.unheardSubscription())
        const fresh = yield* PushRegistrations.register("bob", TestPush.unheardSubscription())
        const swept = yield* Queue.unbounded<number>()
        yield* Layer.build(PushRegistrations.sweepWith({ onSwept: (n) => Queue.offer(swept, n) }))
        // The sweep at start finds nothing old.
        assert.strictEqual(yield* Queue.take(swept), 0)
        yield* sql`UPDATE push_registrations SET refreshed_at = clock_timestamp() - interval '61 days' WHERE id = ${stale.id}::bigint`
        yield* sql`UPDATE push_registrations SET refreshed_at = clock_timestamp() - interval '59 days' WHERE id = ${nearly.id}::bigint`
        yield* TestClock.adjust("59 minutes")
        assert.isTrue(Option.isNone(yield* Queue.poll(swept)))
        yield* TestClock.adjust("1 minute")
        assert.strictEqual(yield* Queue.take(swept), 1)
        const left = yield* sql<{ id: string }>`SELECT id::text AS id FROM push_registrations ORDER BY id`
        assert.deepStrictEqual(
          left.map((r) => r.id),
          [nearly.id, fresh.id],
        )
      }).pipe(Effect.scoped, Effect.provide(TestClock.layer())),
  )
})
