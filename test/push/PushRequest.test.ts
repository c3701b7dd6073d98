import { createPrivateKey, sign } from "node:crypto"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, Redacted, Result } from "effect"
import { TestClock } from "effect/testing"
import webpush from "web-push"
import { send } from "../../src/outbound/OutboundSender.ts"
import type { TargetPolicy } from "../../src/outbound/OutboundTarget.ts"
import * as PushMessageKey from "../../src/push/PushMessageKey.ts"
import * as PushRequest from "../../src/push/PushRequest.ts"
import * as PushVapid from "../../src/push/PushVapid.ts"
import * as PushService from "../../testkit/PushService.ts"

/** The tests' policy: the push service is on loopback over http, as the webhook receivers are. */
const policy: TargetPolicy = { allowHttpLoopback: true, allowCidrs: [], allowHosts: [] }

const subject = "mailto:push-tests@bothy.example"

const vapidKeys = (pair = PushVapid.generate()): PushVapid.VapidKeys => {
  const checked = PushVapid.check({ ...pair, privateKey: Redacted.make(pair.privateKey), subject })
  if (Result.isFailure(checked)) throw checked.failure
  return checked.success
}

/** The claims of the JWT in an `Authorization: vapid t=..., k=...` value. */
const claimsOf = (authorization: string): { aud: string; exp: number; sub: string } => {
  const token = /t=([^,\s]+)/.exec(authorization)![1]!
  return JSON.parse(Buffer.from(token.split(".")[1]!, "base64url").toString("utf8"))
}

const input = (
  subscription: PushService.BrowserSubscription,
  authorization: string,
  overrides: Partial<PushRequest.PushRequestInput> = {},
): PushRequest.PushRequestInput => ({
  endpoint: subscription.json.endpoint,
  p256dh: subscription.json.keys.p256dh,
  auth: subscription.json.keys.auth,
  payload: `{"type":"item.created","space":"s1","id":"1:42","summary":"Grüße ✓"}`,
  ttlSeconds: 86_400,
  urgency: "normal",
  topic: undefined,
  authorization,
  ...overrides,
})

/** Builds the request and sends it to the push service, as the `push.deliver` job will. */
const deliver = (request: PushRequest.PushRequestInput) =>
  Effect.flatMap(PushRequest.build(request), (built) => send(built, policy))

/** An ES256 VAPID header for any claims, signed with node:crypto (web-push validates what it signs). */
const signToken = (keys: PushVapid.VapidKeys, claims: Record<string, unknown>) => {
  const point = Buffer.from(keys.publicKey, "base64url")
  const key = createPrivateKey({
    key: {
      kty: "EC",
      crv: "P-256",
      x: point.subarray(1, 33).toString("base64url"),
      y: point.subarray(33).toString("base64url"),
      d: Redacted.value(keys.privateKey),
    },
    format: "jwk",
  })
  const part = (value: unknown) => Buffer.from(JSON.stringify(value)).toString("base64url")
  const unsigned = `${part({ typ: "JWT", alg: "ES256" })}.${part(claims)}`
  const signature = sign("sha256", Buffer.from(unsigned), { key, dsaEncoding: "ieee-p1363" }).toString("base64url")
  return `vapid t=${unsigned}.${signature}, k=${keys.publicKey}`
}

const refusal = (input: Parameters<typeof PushVapid.check>[0]) => {
  const checked = PushVapid.check(input)
  return Result.isFailure(checked) ? checked.failure : undefined
}

describe("PushRequest", () => {
  it.live(
    "PushDeliversEncryptedToEachRegistration: a built request sent through OutboundSender decrypts to the exact payload, with TTL, Urgency, Topic and valid VAPID claims",
    () =>
      Effect.gen(function* () {
        const keys = vapidKeys()
        const service = yield* PushService.start({ applicationServerKey: keys.publicKey })
        const browser = PushService.browserSubscription(service, "alice")
        const cache = yield* PushVapid.makeTokenCache(keys)
        const authorization = yield* cache.authorization(new URL(browser.json.endpoint).origin)
        const topic = PushMessageKey.topic(PushMessageKey.make(1, "7", 42n))
        const request = input(browser, authorization, { ttlSeconds: 3600, urgency: "high", topic })

        const result = yield* deliver(request)
        assert.strictEqual(result.status, 201)
        const [message] = yield* service.take(1)
        assert.strictEqual(message?.subscriptionId, browser.id)
        assert.strictEqual(message?.plaintext, request.payload)
        assert.deepStrictEqual(message?.headers, {
          ttl: "3600",
          urgency: "high",
          topic,
          contentEncoding: "aes128gcm",
        })
        assert.strictEqual(message?.vapid.aud, service.url)
        assert.strictEqual(message?.vapid.sub, subject)
        assert.strictEqual(message?.vapid.key, keys.publicKey)
        const now = Math.floor(Date.now() / 1000)
        assert.isAbove(message!.vapid.exp, now)
        assert.isAtMost(message!.vapid.exp, now + 12 * 60 * 60)

        // No topic: no Topic header; TTL 0 is still sent.
        yield* deliver(input(browser, authorization, { ttlSeconds: 0, urgency: "very-low" }))
        const [second] = yield* service.take(1)
        assert.deepStrictEqual(second?.headers, {
          ttl: "0",
          urgency: "very-low",
          topic: undefined,
          contentEncoding: "aes128gcm",
        })
        assert.strictEqual(second?.plaintext, request.payload)
        assert.lengthOf(service.log.rejected, 0)
      }),
  )

  it.effect(
    "PushRequest: the request carries the given Authorization, even when web-push holds global VAPID details",
    () =>
      Effect.gen(function* () {
        const other = PushVapid.generate()
        webpush.setVapidDetails("mailto:someone-else@example.com", other.publicKey, other.privateKey)
        const built = yield* PushRequest.build({
          endpoint: "https://updates.push.services.mozilla.com/wpush/v2/abc",
          ...PushService.browserKeys().keys,
          payload: "{}",
          ttlSeconds: 60,
          urgency: "low",
          topic: undefined,
          authorization: "vapid t=given, k=given",
        }).pipe(Effect.ensuring(Effect.sync(() => (webpush.setVapidDetails as unknown as (reset: null) => void)(null))))
        assert.strictEqual(built.headers.Authorization, "vapid t=given, k=given")
        assert.strictEqual(built.headers["Content-Encoding"], "aes128gcm")
        assert.strictEqual(built.headers.TTL, "60")
        assert.strictEqual(built.headers.Urgency, "low")
        assert.notProperty(built.headers, "Topic")
        assert.instanceOf(built.body, Uint8Array)
      }),
  )

  it.effect(
    "PushRequest: a plaintext above 3,000 bytes is PushPayloadTooLarge; 3,000 bytes fit in 4,096 encrypted",
    () =>
      Effect.gen(function* () {
        const { keys } = PushService.browserKeys()
        const at = (payload: string) =>
          PushRequest.build({
            endpoint: "https://fcm.googleapis.com/fcm/send/abc",
            ...keys,
            payload,
            ttlSeconds: 60,
            urgency: "normal",
            topic: undefined,
            authorization: "vapid t=x, k=y",
          })
        const tooLarge = yield* Effect.flip(at(`${"€".repeat(1000)}a`))
        assert.strictEqual(tooLarge._tag, "PushPayloadTooLarge")
        assert.deepStrictEqual({ bytes: tooLarge.bytes, max: tooLarge.max }, { bytes: 3001, max: 3000 })
        assert.strictEqual(PushRequest.maxPlaintextBytes, 3000)
        const fits = yield* at("€".repeat(1000))
        assert.isAtMost(fits.body.length, 4096)
      }),
  )

  it("PushMessageKey: one key per (epoch, registration, seq); its topic is at most 32 URL-safe characters, stable, and differs per key", () => {
    const key = PushMessageKey.make(1, "7", 42n)
    assert.strictEqual(key, "push_1_7_42")
    const topic = PushMessageKey.topic(key)
    assert.match(topic, /^[A-Za-z0-9_-]{1,32}$/)
    assert.strictEqual(PushMessageKey.topic(PushMessageKey.make(1, "7", 42n)), topic)
    const others = [
      PushMessageKey.make(2, "7", 42n),
      PushMessageKey.make(1, "8", 42n),
      PushMessageKey.make(1, "7", 43n),
      PushMessageKey.make(1, "74", 2n),
      PushMessageKey.make(17, "4", 2n),
    ].map(PushMessageKey.topic)
    assert.strictEqual(new Set([topic, ...others]).size, others.length + 1)
    for (const other of others) assert.match(other, /^[A-Za-z0-9_-]{1,32}$/)
  })
})

describe("PushVapid", () => {
  it.effect("PushVapid: the token cache signs once per origin and reuses the token", () =>
    Effect.gen(function* () {
      yield* TestClock.setTime(Date.parse("2026-01-01T00:00:00Z"))
      const cache = yield* PushVapid.makeTokenCache(vapidKeys())
      const fcm = yield* cache.authorization("https://fcm.googleapis.com")
      const mozilla = yield* cache.authorization("https://updates.push.services.mozilla.com")
      assert.notStrictEqual(fcm, mozilla)
      assert.strictEqual(claimsOf(fcm).aud, "https://fcm.googleapis.com")
      assert.strictEqual(claimsOf(mozilla).aud, "https://updates.push.services.mozilla.com")
      assert.strictEqual(claimsOf(fcm).sub, subject)
      assert.strictEqual(claimsOf(fcm).exp, Date.parse("2026-01-01T12:00:00Z") / 1000)
      assert.strictEqual(yield* cache.authorization("https://fcm.googleapis.com"), fcm)
      assert.strictEqual(yield* cache.authorization("https://updates.push.services.mozilla.com"), mozilla)

      // signEach: ECDSA signatures are randomised, so two tokens for the same claims differ.
      const each = yield* PushVapid.makeTokenCache(vapidKeys(), { signEach: true })
      const first = yield* each.authorization("https://fcm.googleapis.com")
      const again = yield* each.authorization("https://fcm.googleapis.com")
      assert.notStrictEqual(first, again)
      assert.deepStrictEqual(claimsOf(first), claimsOf(again))
    }),
  )

  it.effect("PushVapid: a token is renewed renewBefore ahead of its exp, and lives at most 12 h", () =>
    Effect.gen(function* () {
      const start = Date.parse("2026-01-01T00:00:00Z")
      yield* TestClock.setTime(start)
      const origin = "https://fcm.googleapis.com"
      const cache = yield* PushVapid.makeTokenCache(vapidKeys(), { lifetime: "24 hours", renewBefore: "1 hour" })
      const first = yield* cache.authorization(origin)
      assert.strictEqual(claimsOf(first).exp, start / 1000 + 12 * 60 * 60, "lifetime is capped at 12 h")

      yield* TestClock.adjust("10 hours")
      yield* TestClock.adjust("59 minutes")
      assert.strictEqual(yield* cache.authorization(origin), first, "more than renewBefore left: reused")
      yield* TestClock.adjust("1 minute")
      const renewed = yield* cache.authorization(origin)
      assert.notStrictEqual(renewed, first, "renewBefore left: signed again")
      assert.strictEqual(claimsOf(renewed).exp, start / 1000 + 23 * 60 * 60)
      yield* TestClock.adjust("10 hours")
      assert.strictEqual(yield* cache.authorization(origin), renewed)
    }),
  )

  it.effect("PushVapid: the cache keeps at most maxOrigins origins, dropping the one used longest ago", () =>
    Effect.gen(function* () {
      yield* TestClock.setTime(Date.parse("2026-01-01T00:00:00Z"))
      const cache = yield* PushVapid.makeTokenCache(vapidKeys(), { maxOrigins: 2 })
      const a = yield* cache.authorization("https://a.example")
      const b = yield* cache.authorization("https://b.example")
      const c = yield* cache.authorization("https://c.example")
      assert.strictEqual(yield* cache.authorization("https://c.example"), c)
      assert.strictEqual(yield* cache.authorization("https://b.example"), b)
      assert.notStrictEqual(yield* cache.authorization("https://a.example"), a, "a was dropped and is signed again")
    }),
  )

  it("PushVapid.check: accepts a generated pair; refuses a private key of another pair, bad shapes and bad subjects", () => {
    const pair = PushVapid.generate()
    const other = PushVapid.generate()
    const good = { publicKey: pair.publicKey, privateKey: Redacted.make(pair.privateKey), subject }
    const accepted = PushVapid.check(good)
    assert.isTrue(Result.isSuccess(accepted))

    const publicBytes = Buffer.from(pair.publicKey, "base64url")
    const offCurve = Buffer.concat([Buffer.from([0x04]), Buffer.alloc(64, 0x01)]).toString("base64url")
    const cases: ReadonlyArray<readonly [string, Parameters<typeof PushVapid.check>[0], string]> = [
      ["another pair's private key", { ...good, privateKey: Redacted.make(other.privateKey) }, "privateKey"],
      ["public key padded", { ...good, publicKey: `${pair.publicKey}=` }, "publicKey"],
      ["public key not base64url", { ...good, publicKey: pair.publicKey.replace(/.$/, "+") }, "publicKey"],
      ["public key 64 bytes", { ...good, publicKey: publicBytes.subarray(1).toString("base64url") }, "publicKey"],
      [
        "public key compressed",
        {
          ...good,
          publicKey: Buffer.concat([Buffer.from([0x02]), publicBytes.subarray(1, 33)]).toString("base64url"),
        },
        "publicKey",
      ],
      ["public key off the curve", { ...good, publicKey: offCurve }, "publicKey"],
      [
        "private key 31 bytes",
        {
          ...good,
          privateKey: Redacted.make(Buffer.from(pair.privateKey, "base64url").subarray(1).toString("base64url")),
        },
        "privateKey",
      ],
      [
        "private key zero",
        { ...good, privateKey: Redacted.make(Buffer.alloc(32).toString("base64url")) },
        "privateKey",
      ],
      ["private key padded", { ...good, privateKey: Redacted.make(`${pair.privateKey}=`) }, "privateKey"],
      ["subject http:", { ...good, subject: "http://bothy.example/contact" }, "subject"],
      ["subject not a URL", { ...good, subject: "ops@bothy.example" }, "subject"],
      ["subject mailto: without address", { ...good, subject: "mailto:" }, "subject"],
      ["subject https://localhost", { ...good, subject: "https://localhost/contact" }, "subject"],
    ]
    for (const [name, input, field] of cases) {
      const error = refusal(input)
      assert.strictEqual(error?._tag, "InvalidVapidKeys", name)
      assert.strictEqual(error?.field, field, name)
      for (const secret of [pair.privateKey, other.privateKey]) {
        assert.notInclude(error!.message, secret, name)
        assert.notInclude(JSON.stringify(error), secret, name)
      }
    }
    assert.isTrue(Result.isSuccess(PushVapid.check({ ...good, subject: "https://bothy.example/contact" })))
  })
})

describe("PushService", () => {
  it.live(
    "PushConfigErrorsKeepRegistration: the push service rejects a token of the wrong VAPID key, a forged one, an expired one and one for another origin, with 401",
    () =>
      Effect.gen(function* () {
        const keys = vapidKeys()
        const wrong = vapidKeys()
        const service = yield* PushService.start({ applicationServerKey: keys.publicKey })
        const browser = PushService.browserSubscription(service, "bob")
        const origin = service.url
        const wrongKey = yield* (yield* PushVapid.makeTokenCache(wrong)).authorization(origin)
        const rightKey = yield* (yield* PushVapid.makeTokenCache(keys)).authorization(origin)
        const forged = wrongKey.replace(/k=.*$/, `k=${keys.publicKey}`)
        const expired = webpush.getVapidHeaders(
          origin,
          subject,
          keys.publicKey,
          Redacted.value(keys.privateKey),
          "aes128gcm",
          1000,
        ).Authorization
        const otherOrigin = yield* (yield* PushVapid.makeTokenCache(keys)).authorization("https://fcm.googleapis.com")
        // web-push refuses to sign this far ahead, so the test signs it itself.
        const tooLong = signToken(keys, {
          aud: origin,
          exp: Math.floor(Date.now() / 1000) + 25 * 60 * 60,
          sub: subject,
        })

        const cases = [
          [wrongKey, "applicationServerKey"],
          [forged, "signature"],
          [expired, "has passed"],
          [otherOrigin, "aud"],
          [tooLong, "more than 24 h ahead"],
        ] as const
        for (const [authorization, reason] of cases) {
          const result = yield* deliver(input(browser, authorization))
          assert.strictEqual(result.status, 401, reason)
          const [rejection] = yield* service.takeRejections(1)
          assert.strictEqual(rejection?.subscriptionId, browser.id, reason)
          assert.include(rejection!.reason, reason)
          assert.strictEqual(rejection?.status, 401)
        }
        assert.lengthOf(service.log.delivered, 0)

        const accepted = yield* deliver(input(browser, rightKey))
        assert.strictEqual(accepted.status, 201)
        assert.lengthOf(yield* service.take(1), 1)
      }),
  )

  it.live("PushService: a body encrypted for another subscription is rejected with 400; an unknown path with 404", () =>
    Effect.gen(function* () {
      const keys = vapidKeys()
      const service = yield* PushService.start()
      const alice = PushService.browserSubscription(service, "alice")
      const mallory = PushService.browserSubscription(service, "mallory")
      const authorization = yield* (yield* PushVapid.makeTokenCache(keys)).authorization(service.url)

      const misaddressed = yield* deliver({ ...input(mallory, authorization), endpoint: alice.json.endpoint })
      assert.strictEqual(misaddressed.status, 400)
      const [rejection] = yield* service.takeRejections(1)
      assert.strictEqual(rejection?.subscriptionId, alice.id)
      assert.include(rejection!.reason, "does not decrypt")

      const unknown = yield* deliver({ ...input(alice, authorization), endpoint: `${service.url}/push/nobody` })
      assert.strictEqual(unknown.status, 404)
      const [nobody] = yield* service.takeRejections(1)
      assert.strictEqual(nobody?.subscriptionId, undefined)
      assert.lengthOf(service.log.delivered, 0)
    }),
  )

  it.live("PushService: scripted answers per subscription and for all, Retry-After, and a hang until released", () =>
    Effect.gen(function* () {
      const keys = vapidKeys()
      const service = yield* PushService.start()
      const gone = PushService.browserSubscription(service, "gone")
      const busy = PushService.browserSubscription(service, "busy")
      const authorization = yield* (yield* PushVapid.makeTokenCache(keys)).authorization(service.url)
      service.script(gone.id, [{ status: 410 }])
      service.script("all", [{ status: 429, retryAfter: "30" }, { hang: true }])

      const first = yield* deliver(input(gone, authorization))
      assert.strictEqual(first.status, 410)
      const second = yield* deliver(input(gone, authorization))
      assert.deepStrictEqual([second.status, second.retryAfter], [429, "30"])

      const hanging = yield* Effect.forkChild(deliver(input(busy, authorization)))
      const [held] = yield* service.take(3).pipe(Effect.map((all) => all.slice(2)))
      assert.strictEqual(held?.subscriptionId, busy.id)
      assert.strictEqual(held?.status, undefined)
      service.release(503)
      const released = yield* Fiber.join(hanging)
      assert.strictEqual(released.status, 503)
      assert.strictEqual(held?.status, 503)

      const after = yield* deliver(input(busy, authorization))
      assert.strictEqual(after.status, 201, "the script is used up: default 201")
    }),
  )
})
