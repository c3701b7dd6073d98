import { assert, layer } from "@effect/vitest"
import { Clock, Duration, Effect, Metric, Queue } from "effect"
import { TestClock } from "effect/testing"
import * as PermissionGrants from "../../src/authz/PermissionGrants.ts"
import { pushDeliver } from "../../src/authz/Permissions.ts"
import * as PushMessageKey from "../../src/push/PushMessageKey.ts"
import * as PushMetrics from "../../src/push/PushMetrics.ts"
import * as ApnsService from "../../testkit/ApnsService.ts"
import * as FcmService from "../../testkit/FcmService.ts"
import * as PushService from "../../testkit/PushService.ts"
import * as TestNativePush from "../support/TestNativePush.ts"
import * as TestPush from "../support/TestPush.ts"
import { member, outcomes, startWorkerWith } from "../support/TestPushWorker.ts"

const native = (provider: "apns" | "fcm", outcome: PushMetrics.Outcome) =>
  Effect.map(
    Metric.value(Metric.withAttributes(PushMetrics.nativeDeliveries, { provider, outcome })),
    (state) => state.count,
  )

const counter = (outcome: PushMetrics.Outcome) =>
  Effect.map(Metric.value(Metric.withAttributes(PushMetrics.deliveries, { outcome })), (state) => state.count)

const removedGone = Effect.map(
  Metric.value(Metric.withAttributes(PushMetrics.registrationsRemoved, { cause: "gone" })),
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

  it.effect(
    "NativePushRevokedRightIsDeadWithoutRequest: a receiver whose push.deliver right was revoked after the round gets no request to any of its devices, APNs or FCM, and the job is dead; the one still allowed gets its messages",
    () =>
      Effect.gen(function* () {
        const world = yield* TestNativePush.start()
        const [keptApns] = yield* TestNativePush.member("n3", "kim", "apns")
        const [keptFcm] = yield* TestNativePush.member("n3", "kim", "fcm")
        const revoked = [
          ...(yield* TestNativePush.member("n3", "rob", "apns")),
          ...(yield* TestNativePush.member("n3", "rob", "fcm")),
        ]
        const seq = yield* TestNativePush.append("n3", "card.created", "someone")
        yield* TestPush.round()
        yield* PermissionGrants.revoke("rob", pushDeliver, "n3")
        const denied = yield* counter("denied")
        const { finalized } = yield* startWorkerWith(world.settings)
        const [done] = yield* outcomes(finalized, 1)
        assert.strictEqual(done!.outcome._tag, "Cancelled")
        assert.deepStrictEqual(
          (yield* world.apns.take(1)).map((m) => m.token),
          [keptApns!.token],
        )
        assert.deepStrictEqual(
          (yield* world.fcm.take(1)).map((m) => m.token),
          [keptFcm!.token],
        )
        const sent = [...world.apns.log.delivered, ...world.fcm.log.delivered].map((m) => m.token)
        assert.isFalse(
          revoked.some((d) => sent.includes(d.token)),
          "no request for rob's devices",
        )
        assert.strictEqual((yield* counter("denied")) - denied, 2)
        const job = (yield* TestPush.jobs).find((j) => j.seq === String(seq))!
        assert.strictEqual(job.state, "cancelled")
        for (const d of revoked) assert.include(job.errors[0]!.message, `registration ${d.registration}`)
        assert.deepStrictEqual(yield* TestNativePush.registrationsOf("rob"), [...revoked.map((d) => d.registration)])
      }).pipe(Effect.scoped),
  )

  it.effect(
    "ApnsUnregisteredRemovesDevice: APNs' 410 Unregistered removes that device and the others stay; a BadDeviceToken while other devices on the same environment are being delivered removes that one too",
    () =>
      Effect.gen(function* () {
        const world = yield* TestNativePush.start()
        const [gone, stays, bad] = yield* TestNativePush.member("n4", "gus", "apns", 3)
        world.apns.unregister(gone!.token)
        const removed = yield* removedGone
        yield* TestNativePush.append("n4", "card.created", "someone")
        yield* TestPush.round()
        const { finalized } = yield* startWorkerWith(world.settings)
        yield* outcomes(finalized, 1)
        assert.deepStrictEqual((yield* world.apns.take(3)).map((m) => m.status).sort(), [200, 200, 410])
        assert.deepStrictEqual(yield* TestNativePush.registrationsOf("gus"), [stays!.registration, bad!.registration])
        // The next event: `stays` is delivered on the same environment, so `bad`'s BadDeviceToken is its own.
        world.apns.script(bad!.token, [{ status: 400, reason: "BadDeviceToken" }])
        yield* TestNativePush.append("n4", "card.moved", "someone")
        yield* TestPush.round()
        const [second] = yield* outcomes(finalized, 1)
        assert.strictEqual(second!.outcome._tag, "Completed")
        assert.deepStrictEqual((yield* world.apns.take(2)).map((m) => m.status).sort(), [200, 400])
        assert.deepStrictEqual(yield* TestNativePush.registrationsOf("gus"), [stays!.registration])
        assert.strictEqual((yield* removedGone) - removed, 2)
        assert.strictEqual(world.apns.log.delivered.filter((m) => m.token === gone!.token).length, 1)
      }).pipe(Effect.scoped),
  )

  it.effect(
    "FcmUnregisteredRemovesToken: FCM's 404 UNREGISTERED and a 400 INVALID_ARGUMENT about the token remove those tokens; a 400 about anything else and the delivered one stay",
    () =>
      Effect.gen(function* () {
        const world = yield* TestNativePush.start()
        const [gone, invalid, otherwise, stays] = yield* TestNativePush.member("n5", "fay", "fcm", 4)
        world.fcm.unregister(gone!.token)
        world.fcm.script(invalid!.token, [
          {
            status: 400,
            errorCode: "INVALID_ARGUMENT",
            message: "The registration token is not a valid FCM registration token",
          },
        ])
        world.fcm.script(otherwise!.token, [
          { status: 400, errorCode: "INVALID_ARGUMENT", message: "Invalid value at 'message.android.ttl'" },
        ])
        yield* TestNativePush.append("n5", "card.created", "someone")
        yield* TestPush.round()
        const { finalized } = yield* startWorkerWith(world.settings)
        const [done] = yield* outcomes(finalized, 1)
        assert.strictEqual(done!.outcome._tag, "Cancelled", "the message refused for its content is dead")
        assert.deepStrictEqual((yield* world.fcm.take(4)).map((m) => m.status).sort(), [200, 400, 400, 404])
        assert.deepStrictEqual(yield* TestNativePush.registrationsOf("fay"), [
          otherwise!.registration,
          stays!.registration,
        ])
      }).pipe(Effect.scoped),
  )

  it.effect(
    "ApnsBadKeyKeepsDevices: a key APNs does not accept (403 InvalidProviderToken) and a worker on the wrong environment (BadDeviceToken for every device) keep every device: dead, counted as configuration errors",
    () =>
      Effect.gen(function* () {
        const world = yield* TestNativePush.start()
        const devices = yield* TestNativePush.member("n6", "hal", "apns", 3)
        const before = yield* native("apns", "config_error")
        yield* TestNativePush.append("n6", "card.created", "someone")
        yield* TestPush.round()
        // The worker signs with another key than the one APNs knows for this key id.
        const other = TestNativePush.apnsCredentials(ApnsService.makeKey(), world.apns)
        // That worker stops before the next one starts, so it never claims the next event's job.
        const [done] = yield* Effect.scoped(
          Effect.flatMap(startWorkerWith({ ...world.settings, apns: other }), (w) => outcomes(w.finalized, 1)),
        )
        assert.strictEqual(done!.outcome._tag, "Cancelled")
        assert.deepStrictEqual(
          world.apns.log.refused.map((r) => `${r.status} ${r.reason}`),
          devices.map(() => "403 InvalidProviderToken"),
        )
        assert.strictEqual((yield* native("apns", "config_error")) - before, 3)
        assert.deepStrictEqual(
          yield* TestNativePush.registrationsOf("hal"),
          devices.map((d) => d.registration),
        )
        // Every device answers BadDeviceToken and none is delivered: that is the worker's environment.
        world.apns.script(
          "all",
          devices.map(() => ({ status: 400, reason: "BadDeviceToken" }) as const),
        )
        yield* TestNativePush.append("n6", "card.moved", "someone")
        yield* TestPush.round()
        const right = yield* startWorkerWith(world.settings)
        const [wrongEnvironment] = yield* outcomes(right.finalized, 1)
        assert.strictEqual(wrongEnvironment!.outcome._tag, "Cancelled")
        assert.deepStrictEqual(
          (yield* world.apns.take(3)).map((m) => m.status),
          [400, 400, 400],
        )
        assert.strictEqual((yield* native("apns", "config_error")) - before, 6)
        assert.deepStrictEqual(
          yield* TestNativePush.registrationsOf("hal"),
          devices.map((d) => d.registration),
        )
        const job = (yield* TestPush.jobs).at(-1)!
        assert.include(job.errors.at(-1)!.message, "environment")
      }).pipe(Effect.scoped),
  )

  it.effect(
    "FcmBadCredentialsKeepTokens: a service account Google refuses (invalid_grant), and FCM's 401 and 403, keep every token: dead, counted as configuration errors",
    () =>
      Effect.gen(function* () {
        const world = yield* TestNativePush.start()
        const tokens = yield* TestNativePush.member("n7", "ivy", "fcm", 2)
        const before = yield* native("fcm", "config_error")
        yield* TestNativePush.append("n7", "card.created", "someone")
        yield* TestPush.round()
        const stranger = TestNativePush.fcmCredentials(FcmService.makeServiceAccount(), world.fcm)
        const [done] = yield* Effect.scoped(
          Effect.flatMap(startWorkerWith({ ...world.settings, fcm: stranger }), (w) => outcomes(w.finalized, 1)),
        )
        assert.strictEqual(done!.outcome._tag, "Cancelled")
        assert.isTrue(world.fcm.log.refused.some((r) => r.startsWith("token:")))
        assert.strictEqual(world.fcm.log.delivered.length, 0, "no message without an access token")
        assert.strictEqual((yield* native("fcm", "config_error")) - before, 2)
        // With the right account, FCM itself refuses: 401 for one, 403 for the other.
        world.fcm.script(tokens[0]!.token, [{ status: 401, errorCode: "THIRD_PARTY_AUTH_ERROR" }])
        world.fcm.script(tokens[1]!.token, [{ status: 403, errorCode: "SENDER_ID_MISMATCH" }])
        yield* TestNativePush.append("n7", "card.moved", "someone")
        yield* TestPush.round()
        const right = yield* startWorkerWith(world.settings)
        const [refused] = yield* outcomes(right.finalized, 1)
        assert.strictEqual(refused!.outcome._tag, "Cancelled")
        assert.deepStrictEqual((yield* world.fcm.take(2)).map((m) => m.status).sort(), [401, 403])
        assert.strictEqual((yield* native("fcm", "config_error")) - before, 4)
        assert.deepStrictEqual(
          yield* TestNativePush.registrationsOf("ivy"),
          tokens.map((d) => d.registration),
        )
      }).pipe(Effect.scoped),
  )
})

const jwtClaims = (authorization: string) =>
  JSON.parse(Buffer.from(authorization.split(".")[1]!, "base64url").toString("utf8")) as { iat: number; iss: string }

layer(TestPush.layer(), { excludeTestServices: true })("NativePushDelivery provider token", (it) => {
  it.effect(
    "ApnsProviderTokenRenewed: by the Clock, the provider token of the first message is reused at 19 and 39 minutes, and a new one is signed at 41 minutes (after 20, before 60), never one per request; APNs accepts every one",
    () =>
      Effect.gen(function* () {
        yield* TestClock.setTime(Date.now() + 1000)
        const world = yield* TestNativePush.start()
        yield* TestNativePush.member("t1", "tom", "apns", 2)
        const { finalized } = yield* startWorkerWith(world.settings)
        const deliver = Effect.gen(function* () {
          yield* TestNativePush.append("t1", "card.created", "someone")
          yield* TestPush.round()
          yield* outcomes(finalized, 1)
          yield* world.apns.take(2)
          return [...world.apns.log.tokens].map((t) => jwtClaims(t).iat)
        })
        const start = Math.floor((yield* Clock.currentTimeMillis) / 1000)
        assert.deepStrictEqual(yield* deliver, [start])
        yield* TestClock.adjust("19 minutes")
        assert.deepStrictEqual(yield* deliver, [start], "the same token at 19 minutes")
        yield* TestClock.adjust("20 minutes")
        assert.deepStrictEqual(yield* deliver, [start], "the same token at 39 minutes")
        yield* TestClock.adjust("2 minutes")
        const iats = yield* deliver
        assert.strictEqual(iats.length, 2, "a new token at 41 minutes")
        const renewedAfter = iats[1]! - iats[0]!
        assert.isTrue(renewedAfter > 20 * 60 && renewedAfter < 60 * 60, `renewed after ${renewedAfter} s`)
        assert.strictEqual(world.apns.log.delivered.length, 8, "8 requests under 2 tokens")
        assert.deepStrictEqual(world.apns.log.refused, [])
        assert.deepStrictEqual(
          [...world.apns.log.tokens].map((t) => jwtClaims(t).iss),
          [world.key.teamId, world.key.teamId],
        )
      }).pipe(Effect.scoped, Effect.provide(TestClock.layer())),
  )
})

layer(TestPush.layer({ ttl: Duration.minutes(3) }), { excludeTestServices: true })(
  "NativePushDelivery retries",
  (it) => {
    it.effect(
      "NativePushRetriesOn429And5xx: an APNs 500 is retried after 10 s, its 429 waits for Retry-After (120 s) without spending an attempt, then the message is delivered; FCM failing with 503 for longer than the TTL (3 min) gets its retries at 10 s and 60 s, and then the job is dead without another request; both registrations are kept",
      () =>
        Effect.gen(function* () {
          yield* TestClock.setTime(Date.now() + 1000)
          const world = yield* TestNativePush.start()
          const [flaky] = yield* TestNativePush.member("r1", "jo", "apns")
          const [down] = yield* TestNativePush.member("r2", "kai", "fcm")
          world.apns.script(flaky!.token, [{ status: 500 }, { status: 429, retryAfter: "120" }, { status: 200 }])
          world.fcm.script(
            down!.token,
            Array.from({ length: 10 }, () => ({ status: 503 as const })),
          )
          yield* TestNativePush.append("r1", "card.created", "someone")
          yield* TestNativePush.append("r2", "card.created", "someone")
          yield* TestPush.round()
          const { finalized } = yield* startWorkerWith(world.settings)
          const byJob = new Map<string, string>()
          for (const j of yield* TestPush.jobs) byJob.set(j.id, j.registration === flaky!.registration ? "apns" : "fcm")
          const take = (n: number) =>
            Effect.map(outcomes(finalized, n), (rs) =>
              rs.map((r) => `${byJob.get(r.id.toString())}:${r.outcome._tag}`).sort(),
            )
          const sent = () => world.apns.log.delivered.length + world.fcm.log.delivered.length
          const idle = (received: number) =>
            Effect.gen(function* () {
              assert.strictEqual(yield* Queue.size(finalized), 0, "no outcome before its time")
              assert.strictEqual(sent(), received, "no request before its time")
            })

          assert.deepStrictEqual(yield* take(2), ["apns:Retry", "fcm:Retry"])
          yield* TestClock.adjust("9 seconds")
          yield* idle(2)
          yield* TestClock.adjust("1 second")
          assert.deepStrictEqual(yield* take(2), ["apns:Snooze", "fcm:Retry"])
          yield* TestClock.adjust("59 seconds")
          yield* idle(4)
          yield* TestClock.adjust("1 second")
          assert.deepStrictEqual(yield* take(1), ["fcm:Retry"])
          yield* TestClock.adjust("59 seconds")
          yield* idle(5)
          yield* TestClock.adjust("1 second")
          assert.deepStrictEqual(yield* take(1), ["apns:Completed"])
          assert.strictEqual(world.apns.log.delivered.at(-1)!.status, 200)
          yield* TestClock.adjust("4 minutes")
          assert.deepStrictEqual(yield* take(1), ["fcm:Cancelled"])
          assert.strictEqual(world.fcm.log.delivered.length, 3)
          const dead = (yield* TestPush.jobs).find((j) => j.registration === down!.registration)!
          assert.strictEqual(dead.state, "cancelled")
          assert.include(dead.errors.at(-1)!.message, "TTL")
          assert.deepStrictEqual(yield* TestNativePush.registrationsOf("jo"), [flaky!.registration])
          assert.deepStrictEqual(yield* TestNativePush.registrationsOf("kai"), [down!.registration])
        }).pipe(Effect.scoped, Effect.provide(TestClock.layer())),
    )
    it.effect(
      "NativePushMixedBatchSettlesEachRegistration: one principal's browser, iOS device and Android token are one batch; APNs' 429 moves the device to a job of its own at its Retry-After, FCM's 500 is retried at 10 s, and each registration gets exactly one delivered message",
      () =>
        Effect.gen(function* () {
          yield* TestClock.setTime(Date.now() + 1000)
          const world = yield* TestNativePush.start()
          const browserService = yield* PushService.start()
          yield* member(browserService, "m1", "mia")
          const [device] = yield* TestNativePush.member("m1", "mia", "apns")
          const [token] = yield* TestNativePush.member("m1", "mia", "fcm")
          world.apns.script(device!.token, [{ status: 429, retryAfter: "60" }])
          world.fcm.script(token!.token, [{ status: 500 }])
          const seq = yield* TestNativePush.append("m1", "card.created", "someone")
          yield* TestPush.round()
          const jobsOfEvent = Effect.map(TestPush.jobs, (jobs) => jobs.filter((j) => j.seq === String(seq)))
          assert.strictEqual((yield* jobsOfEvent).length, 1, "one batch for the three kinds")
          const { finalized } = yield* startWorkerWith(world.settings)
          const tags = (n: number) => Effect.map(outcomes(finalized, n), (rs) => rs.map((r) => r.outcome._tag).sort())

          assert.deepStrictEqual(yield* tags(1), ["Retry"])
          assert.strictEqual((yield* browserService.take(1))[0]!.status, 201)
          // In order of first registration: the device's split job, then the batch keeping the token.
          assert.deepStrictEqual(
            (yield* jobsOfEvent).map((j) => [j.registrations, j.state]),
            [
              [[device!.registration], "scheduled"],
              [[token!.registration], "retryable"],
            ],
          )
          yield* TestClock.adjust("10 seconds")
          assert.deepStrictEqual(yield* tags(1), ["Completed"])
          yield* TestClock.adjust("50 seconds")
          assert.deepStrictEqual(yield* tags(1), ["Completed"])
          const delivered = (of: string, log: ReadonlyArray<{ token: string; status: number }>) =>
            log.filter((m) => m.token === of && m.status === 200).length
          assert.strictEqual(delivered(device!.token, world.apns.log.delivered), 1)
          assert.strictEqual(delivered(token!.token, world.fcm.log.delivered), 1)
          assert.strictEqual(browserService.log.delivered.length, 1)
          assert.deepStrictEqual(
            world.apns.log.delivered.map((m) => m.status),
            [429, 200],
          )
        }).pipe(Effect.scoped, Effect.provide(TestClock.layer())),
    )
  },
)
