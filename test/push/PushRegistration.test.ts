import { createECDH, randomBytes } from "node:crypto"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import type { ResolvedAddress, TargetPolicy } from "../../src/outbound/OutboundTarget.ts"
import * as PushRegistration from "../../src/push/PushRegistration.ts"

/** Simulated DNS: push services on public addresses, and hosts an attacker might register. */
const zone: Record<string, ReadonlyArray<ResolvedAddress>> = {
  "fcm.googleapis.com": [{ address: "142.250.74.106", family: 4 }],
  "updates.push.services.mozilla.com": [{ address: "34.117.65.55", family: 4 }],
  "push.example.org": [{ address: "93.184.216.34", family: 4 }],
  "evil.push.services.mozilla.com.attacker.example": [{ address: "93.184.216.35", family: 4 }],
  "internal.push.services.mozilla.com": [{ address: "10.0.0.7", family: 4 }],
}

const policy: TargetPolicy = {
  allowHttpLoopback: false,
  allowCidrs: [],
  allowHosts: [],
  resolve: async (host) => {
    const answer = zone[host]
    if (answer === undefined) throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${host}`), { code: "ENOTFOUND" })
    return answer
  },
}

/** What a browser's `PushSubscription.toJSON()` holds: a fresh P-256 key pair and 16 random bytes. */
const browserKeys = () => {
  const ecdh = createECDH("prime256v1")
  ecdh.generateKeys()
  return { p256dh: ecdh.getPublicKey().toString("base64url"), auth: randomBytes(16).toString("base64url") }
}

const subscription = (endpoint: string, keys = browserKeys()) => ({ endpoint, expirationTime: null, keys })

/** The refusal's field and reason, or "accepted". */
const verdict = (input: unknown, patterns?: ReadonlyArray<string>) =>
  PushRegistration.check(input, policy, patterns).pipe(
    Effect.map(() => "accepted"),
    Effect.catchTag("InvalidPushRegistration", (e) => Effect.succeed(`${e.field}: ${e.reason}`)),
  )

describe("PushRegistration", () => {
  it.effect(
    "PushRejectsBadRegistration: a browser's subscription to a known push service is accepted, keys decoded",
    () =>
      Effect.gen(function* () {
        const keys = browserKeys()
        const checked = yield* PushRegistration.check(
          subscription("https://fcm.googleapis.com/fcm/send/abc:def", keys),
          policy,
        )
        assert.strictEqual(checked.endpoint.hostname, "fcm.googleapis.com")
        assert.strictEqual(checked.p256dh.length, 65)
        assert.strictEqual(checked.auth.length, 16)
        assert.strictEqual(Buffer.from(checked.auth).toString("base64url"), keys.auth)
        assert.strictEqual(
          yield* verdict(subscription("https://updates.push.services.mozilla.com/wpush/v2/gAAAA")),
          "accepted",
        )
      }),
  )

  it.effect("PushRejectsBadRegistration: bad endpoints, private and metadata hosts, hosts outside the allow-list", () =>
    Effect.gen(function* () {
      const cases: ReadonlyArray<readonly [string, string]> = [
        ["http://fcm.googleapis.com/fcm/send/x", "endpoint: UnsafeEndpoint"],
        ["not a url", "endpoint: UnsafeEndpoint"],
        ["https://user:pw@fcm.googleapis.com/fcm/send/x", "endpoint: UnsafeEndpoint"],
        ["https://127.0.0.1/push", "endpoint: UnsafeEndpoint"],
        ["https://169.254.169.254/latest/meta-data", "endpoint: UnsafeEndpoint"],
        ["https://[fd00::1]/push", "endpoint: UnsafeEndpoint"],
        // Inside the allow-list by name, but resolving to a private address.
        ["https://internal.push.services.mozilla.com/wpush/v2/x", "endpoint: UnsafeEndpoint"],
        ["https://push.example.org/p/1", "endpoint: HostNotAllowed"],
        // `*.push.services.mozilla.com` covers its subdomains, not a name that merely contains it.
        ["https://evil.push.services.mozilla.com.attacker.example/x", "endpoint: HostNotAllowed"],
        // Outside the allow-list: refused as such, never looked up (`PushHostCheckedBeforeResolve`).
        ["https://nowhere.example/x", "endpoint: HostNotAllowed"],
        // Inside it, but without an address.
        ["https://nowhere.push.services.mozilla.com/x", "endpoint: UnsafeEndpoint"],
      ]
      for (const [endpoint, expected] of cases) {
        assert.strictEqual(yield* verdict(subscription(endpoint)), expected, endpoint)
      }
      // `*` lets any public host through (a self-hosted push server), never a private one.
      assert.strictEqual(yield* verdict(subscription("https://push.example.org/p/1"), ["*"]), "accepted")
      assert.strictEqual(
        yield* verdict(subscription("https://internal.push.services.mozilla.com/x"), ["*"]),
        "endpoint: UnsafeEndpoint",
      )
    }),
  )

  it.effect(
    "PushHostCheckedBeforeResolve: an endpoint whose host is outside push.hosts is refused without any DNS lookup; an allowed one is looked up once",
    () =>
      Effect.gen(function* () {
        const lookedUp: Array<string> = []
        const observed: TargetPolicy = {
          ...policy,
          resolve: (host) => {
            lookedUp.push(host)
            return policy.resolve!(host)
          },
        }
        const outside = [
          // In the simulated DNS, so a lookup before the host check would succeed and be seen.
          "https://push.example.org/p/1",
          "https://evil.push.services.mozilla.com.attacker.example/x",
          // A name only a lookup would reveal to the attacker's DNS server (a beacon).
          "https://beacon-7f3a.attacker.example/x",
        ]
        const verdicts = yield* Effect.forEach(outside, (endpoint) =>
          PushRegistration.check(subscription(endpoint), observed).pipe(
            Effect.map(() => "accepted"),
            Effect.catchTag("InvalidPushRegistration", (e) => Effect.succeed(`${e.field}: ${e.reason}`)),
          ),
        )
        assert.deepStrictEqual(lookedUp, [], "no host outside push.hosts was looked up")
        assert.deepStrictEqual(
          verdicts,
          outside.map(() => "endpoint: HostNotAllowed"),
        )

        // The resolver observed is the one the check uses: an allowed host is resolved, once.
        yield* PushRegistration.check(subscription("https://fcm.googleapis.com/fcm/send/x"), observed)
        assert.deepStrictEqual(lookedUp, ["fcm.googleapis.com"])
      }),
  )

  it.effect("PushRejectsBadRegistration: bad keys and shapes", () =>
    Effect.gen(function* () {
      const endpoint = "https://fcm.googleapis.com/fcm/send/x"
      const good = browserKeys()
      const offCurve = Buffer.from(good.p256dh, "base64url")
      offCurve[64]! ^= 1
      const compressed = (() => {
        const ecdh = createECDH("prime256v1")
        ecdh.generateKeys()
        return ecdh.getPublicKey(undefined, "compressed").toString("base64url")
      })()
      const cases: ReadonlyArray<readonly [unknown, string]> = [
        [subscription(endpoint, { ...good, p256dh: offCurve.toString("base64url") }), "keys.p256dh: BadP256dh"],
        [subscription(endpoint, { ...good, p256dh: compressed }), "keys.p256dh: BadP256dh"],
        [subscription(endpoint, { ...good, p256dh: "not base64!" }), "keys.p256dh: BadP256dh"],
        [subscription(endpoint, { ...good, p256dh: "" }), "keys.p256dh: BadP256dh"],
        [subscription(endpoint, { ...good, auth: randomBytes(15).toString("base64url") }), "keys.auth: BadAuth"],
        [subscription(endpoint, { ...good, auth: randomBytes(32).toString("base64url") }), "keys.auth: BadAuth"],
        [subscription(endpoint, { ...good, auth: "***" }), "keys.auth: BadAuth"],
        [{ endpoint, keys: { p256dh: good.p256dh } }, "keys.auth: BadShape"],
        [{ keys: good }, "endpoint: BadShape"],
        [{ endpoint: `https://fcm.googleapis.com/${"x".repeat(3000)}`, keys: good }, "endpoint: BadShape"],
        [{ endpoint: "https://fcm.googleapis.com/a\u0000b", keys: good }, "endpoint: BadShape"],
        ["a string", ": BadShape"],
      ]
      for (const [input, expected] of cases) {
        assert.strictEqual(yield* verdict(input), expected, JSON.stringify(input).slice(0, 120))
      }
    }),
  )
})
