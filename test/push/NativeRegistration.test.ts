import { assert, layer } from "@effect/vitest"
import { Effect, Exit } from "effect"
import { SqlClient } from "effect/sql"
import * as PushRegistrations from "../../src/push/PushRegistrations.ts"
import * as TestPush from "../support/TestPush.ts"

const apnsToken = "a1".repeat(32)
const fcmToken = "dGVzdC10b2tlbi0x:APA91bH_example-registration-token"

const refusal = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.map(Effect.exit(effect), (exit) => {
    assert.isTrue(Exit.isFailure(exit))
    const error = Exit.isFailure(exit) ? (exit.cause.reasons[0] as { error?: { reason: string; field: string } }) : {}
    return `${error.error?.field}:${error.error?.reason}`
  })

layer(TestPush.layer(), { excludeTestServices: true })("NativeRegistration", (it) => {
  it.effect(
    "NativeRegistrationsOfThreeKinds: one principal holds a browser, an APNs device and an FCM token; each is listed with its kind, and a device registered again is one row under its last principal",
    () =>
      Effect.gen(function* () {
        const browser = yield* PushRegistrations.register("ann", TestPush.unheardSubscription())
        const apns = yield* PushRegistrations.registerNative("ann", "apns", {
          token: apnsToken.toUpperCase(),
          topic: "com.example.bothy",
          environment: "sandbox",
        })
        const fcm = yield* PushRegistrations.registerNative("ann", "fcm", { token: fcmToken })
        assert.isTrue(apns.created && fcm.created && browser.created)
        const listed = yield* PushRegistrations.list("ann")
        assert.deepStrictEqual(
          listed.map((r) => [r.kind, r.token, r.topic, r.environment, r.endpoint === null]),
          [
            ["fcm", fcmToken, null, null, true],
            ["apns", apnsToken, "com.example.bothy", "sandbox", true],
            ["webpush", null, null, null, false],
          ],
        )
        const again = yield* PushRegistrations.registerNative("ben", "apns", {
          token: apnsToken,
          topic: "com.example.bothy",
          environment: "production",
        })
        assert.strictEqual(again.id, apns.id)
        assert.isFalse(again.created)
        const moved = yield* PushRegistrations.list("ben")
        assert.deepStrictEqual(
          moved.map((r) => [r.id, r.environment]),
          [[apns.id, "production"]],
        )
      }),
  )

  it.effect(
    "NativeRegistrationRefusesBadInput: a token, topic or environment out of shape is a typed error naming the field, and nothing is stored",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const [before] = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM push_registrations`
        const apns = (device: unknown) => refusal(PushRegistrations.registerNative("cy", "apns", device))
        const good = { token: apnsToken, topic: "com.example.app", environment: "production" }
        assert.strictEqual(yield* apns({ ...good, token: "not hex" }), "apns.token:BadToken")
        assert.strictEqual(yield* apns({ ...good, token: "ab" }), "apns.token:BadToken")
        assert.strictEqual(yield* apns({ ...good, token: `${apnsToken}/../x` }), "apns.token:BadToken")
        assert.strictEqual(yield* apns({ ...good, topic: "no dots" }), "apns.topic:BadTopic")
        assert.strictEqual(yield* apns({ ...good, environment: "development" }), "apns.environment:BadEnvironment")
        assert.strictEqual(yield* apns({ token: apnsToken }), "apns.topic:BadShape")
        const fcm = (device: unknown) => refusal(PushRegistrations.registerNative("cy", "fcm", device))
        assert.strictEqual(yield* fcm({ token: "short" }), "fcm.token:BadToken")
        assert.strictEqual(yield* fcm({ token: `${fcmToken}/../../x` }), "fcm.token:BadToken")
        assert.strictEqual(yield* fcm({}), "fcm.token:BadShape")
        const principal = yield* Effect.exit(PushRegistrations.registerNative("", "fcm", { token: fcmToken }))
        assert.isTrue(Exit.isFailure(principal))
        const [after] = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM push_registrations`
        assert.strictEqual(after!.n, before!.n)
        // The table holds each kind to its columns: a device row with an endpoint is refused.
        const mixed = yield* Effect.exit(
          sql`INSERT INTO push_registrations (principal, kind, token, endpoint) VALUES ('cy', 'fcm', 'x', 'https://a/b')`,
        )
        assert.isTrue(Exit.isFailure(mixed))
      }),
  )
})
