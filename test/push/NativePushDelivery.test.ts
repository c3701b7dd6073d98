import { assert, layer } from "@effect/vitest"
import { Effect, Metric } from "effect"
import * as PushMessageKey from "../../src/push/PushMessageKey.ts"
import * as PushMetrics from "../../src/push/PushMetrics.ts"
import * as TestNativePush from "../support/TestNativePush.ts"
import * as TestPush from "../support/TestPush.ts"
import { outcomes, startWorkerWith } from "../support/TestPushWorker.ts"

const native = (provider: "apns" | "fcm", outcome: PushMetrics.Outcome) =>
  Effect.map(
    Metric.value(Metric.withAttributes(PushMetrics.nativeDeliveries, { provider, outcome })),
    (state) => state.count,
  )

layer(TestPush.layer(), { excludeTestServices: true })("NativePushDelivery", (it) => {
  it.effect(
    "ApnsDeliversToEachDevice: each receiver's iOS devices get exactly one message per event over one HTTP/2 connection, with the rendered payload (aps.alert, thread-id) and headers (apns-topic, apns-push-type, apns-collapse-id from the message's topic, apns-expiration from the TTL), all under one provider token",
    () =>
      Effect.gen(function* () {
        const world = yield* TestNativePush.start()
        const bob = yield* TestNativePush.member("n1", "bob", "apns", 2)
        const carol = yield* TestNativePush.member("n1", "carol", "apns", 1, "production")
        const created = yield* TestNativePush.append("n1", "card.created", "alice", "Alice added “Plan”")
        const moved = yield* TestNativePush.append("n1", "card.moved", "carol")
        yield* TestPush.round()
        const before = yield* native("apns", "delivered")
        const { finalized } = yield* startWorkerWith(world.settings)
        yield* outcomes(finalized, 2)
        const expected = [
          ...[...bob, ...carol].map((d) => `${d.token}:card.created`),
          ...bob.map((d) => `${d.token}:card.moved`),
        ].sort()
        const messages = yield* world.apns.take(expected.length)
        assert.deepStrictEqual(messages.map((m) => `${m.token}:${m.payload.bothy?.type}`).sort(), expected)
        assert.strictEqual(world.apns.log.delivered.length, expected.length, "nothing more arrived")
        assert.deepStrictEqual(world.apns.log.refused, [])
        assert.deepStrictEqual(world.apns.counts(), { sessions: 1, streams: expected.length, http1Requests: 0 })
        assert.strictEqual(world.apns.log.tokens.size, 1, "one provider token for every request")

        const first = messages.find((m) => m.token === bob[0]!.token && m.payload.bothy?.type === "card.created")!
        const key = PushMessageKey.make(1, bob[0]!.registration, created)
        assert.deepStrictEqual(first.payload.aps, {
          alert: { title: "card.created", body: "Alice added “Plan”" },
          "thread-id": "n1",
        })
        assert.strictEqual((first.payload.bothy as Record<string, string>).id, key)
        assert.strictEqual((first.payload.bothy as Record<string, string>).event, `1.${created}`)
        assert.strictEqual(first.headers["apns-topic"], TestNativePush.bundleId)
        assert.strictEqual(first.headers["apns-push-type"], "alert")
        assert.strictEqual(first.headers["apns-collapse-id"], PushMessageKey.topic(key))
        const expiration = Number(first.headers["apns-expiration"]) - Date.now() / 1000
        assert.isTrue(expiration > 86_000 && expiration <= 86_401, `apns-expiration ${expiration} s ahead`)
        const other = messages.find((m) => m.payload.bothy?.type === "card.moved")!
        assert.strictEqual(other.payload.aps.alert && (other.payload.aps.alert as { body: string }).body, "in n1")
        assert.isDefined(moved)
        assert.strictEqual((yield* native("apns", "delivered")) - before, expected.length)
      }).pipe(Effect.scoped),
  )

  it.effect(
    "FcmDeliversToEachToken: each receiver's Android tokens get exactly one message per event, with notification, data, android.collapse_key and ttl; the access token is fetched once and reused",
    () =>
      Effect.gen(function* () {
        const world = yield* TestNativePush.start()
        const dan = yield* TestNativePush.member("n2", "dan", "fcm", 2)
        const eve = yield* TestNativePush.member("n2", "eve", "fcm")
        const created = yield* TestNativePush.append("n2", "card.created", "someone", "A card")
        yield* TestNativePush.append("n2", "card.moved", "someone")
        yield* TestPush.round()
        const { finalized } = yield* startWorkerWith(world.settings)
        yield* outcomes(finalized, 2)
        const tokens = [...dan, ...eve]
        const messages = yield* world.fcm.take(tokens.length * 2)
        const data = (m: (typeof messages)[number]) => m.message.data as Record<string, string>
        assert.deepStrictEqual(
          messages.map((m) => `${m.token}:${data(m).type}`).sort(),
          tokens.flatMap((d) => [`${d.token}:card.created`, `${d.token}:card.moved`]).sort(),
        )
        assert.deepStrictEqual(world.fcm.log.refused, [])
        assert.strictEqual(world.fcm.log.tokensIssued, 1, "one access token for every message")
        const first = messages.find((m) => m.token === dan[0]!.token && data(m).type === "card.created")!
        const key = PushMessageKey.make(1, dan[0]!.registration, created)
        assert.deepStrictEqual(first.message.notification, { title: "card.created", body: "A card" })
        assert.strictEqual(data(first).id, key)
        assert.strictEqual(data(first).space, "n2")
        const android = first.message.android as { collapse_key: string; ttl: string }
        assert.strictEqual(android.collapse_key, PushMessageKey.topic(key))
        const ttl = Number(android.ttl.replace(/s$/, ""))
        assert.isTrue(ttl > 86_000 && ttl <= 86_400, `ttl ${android.ttl}`)
        assert.strictEqual(world.fcm.counts().sessions, 1, "the token endpoint and FCM on one connection here")
      }).pipe(Effect.scoped),
  )
})
