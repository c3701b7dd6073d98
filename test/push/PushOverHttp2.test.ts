import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as OutboundSender from "../../src/outbound/OutboundSender.ts"
import type { TargetPolicy } from "../../src/outbound/OutboundTarget.ts"
import * as PushConnections from "../../src/push/PushConnections.ts"
import * as PushEncryption from "../../src/push/PushEncryption.ts"
import type * as PushRequest from "../../src/push/PushRequest.ts"
import { sendLimits } from "../../src/push/PushSend.ts"
import * as PushVapid from "../../src/push/PushVapid.ts"
import * as PushService from "../../testkit/PushService.ts"
import * as TestCertificate from "../../testkit/TestCertificate.ts"
import * as TestPush from "../support/TestPush.ts"

const policy: TargetPolicy = { allowHttpLoopback: true, allowCidrs: [], allowHosts: [] }

/** A push service over TLS, a browser subscribed to it, and the input of one message to it. */
const world = Effect.gen(function* () {
  const vapid = TestPush.vapidKeys()
  const service = yield* PushService.start({ tls: true, applicationServerKey: vapid.publicKey })
  const browser = PushService.browserSubscription(service, "h2")
  const authorization = yield* (yield* PushVapid.makeTokenCache(vapid)).authorization(service.url)
  const input = (payload: string, endpoint = browser.json.endpoint): PushRequest.PushRequestInput => ({
    endpoint,
    ...browser.json.keys,
    payload,
    ttlSeconds: 60,
    urgency: "normal",
    topic: undefined,
    authorization,
  })
  return { service, browser, input }
})

describe("PushOverHttp2", () => {
  it.live(
    "PushOverHttp2: 40 pushes at once to one push service are 40 streams on one HTTP/2 connection, and each decrypts to its payload; the same service answers an HTTP/1.1 client too",
    () =>
      Effect.gen(function* () {
        const { service, input } = yield* world
        const settings = TestPush.settings({ policy, extraCa: [TestCertificate.cert] })
        const connections = yield* PushConnections.make(settings, sendLimits)
        const encryption = yield* PushEncryption.make(2)
        const payloads = Array.from({ length: 40 }, (_, i) => `{"n":${i}}`)
        const results = yield* Effect.forEach(
          payloads,
          (payload) =>
            Effect.flatMap(encryption.build(input(payload)), (request) =>
              OutboundSender.send(request, policy, sendLimits, connections),
            ),
          { concurrency: "unbounded" },
        )
        assert.deepStrictEqual(
          results.map((r) => r.status),
          payloads.map(() => 201),
        )
        const got = yield* service.take(payloads.length)
        assert.deepStrictEqual(got.map((m) => m.plaintext).sort(), [...payloads].sort())
        assert.lengthOf(service.log.rejected, 0)
        assert.deepStrictEqual(service.counts(), { sessions: 1, streams: 40, http1Requests: 0 })

        const http1 = yield* OutboundSender.connections(policy, sendLimits, {
          http2: false,
          extraCa: [TestCertificate.cert],
        })
        const again = yield* encryption.build(input(`{"over":"http/1.1"}`))
        assert.strictEqual((yield* OutboundSender.send(again, policy, sendLimits, http1)).status, 201)
        assert.strictEqual((yield* service.take(1))[0]?.plaintext, `{"over":"http/1.1"}`)
        assert.deepStrictEqual(service.counts(), { sessions: 1, streams: 40, http1Requests: 1 })
      }).pipe(Effect.scoped),
  )

  it.live(
    "PushOverHttp2: the connect-time address check holds with HTTP/2 on: a push host resolving to a private address, or to loopback when the policy does not allow it, is refused and nothing reaches the service",
    () =>
      Effect.gen(function* () {
        const { service, browser, input } = yield* world
        const port = new URL(service.url).port
        const endpoint = `https://push.service.test:${port}${new URL(browser.json.endpoint).pathname}`
        const cases: ReadonlyArray<readonly [string, TargetPolicy]> = [
          ["10.0.0.1", { ...policy, resolve: async () => [{ address: "10.0.0.1", family: 4 }] }],
          [
            "127.0.0.1",
            { ...policy, allowHttpLoopback: false, resolve: async () => [{ address: "127.0.0.1", family: 4 }] },
          ],
        ]
        const encryption = yield* PushEncryption.make(0)
        for (const [address, refusing] of cases) {
          const connections = yield* PushConnections.make(
            TestPush.settings({ policy: refusing, extraCa: [TestCertificate.cert] }),
            sendLimits,
          )
          const request = yield* encryption.build(input("{}", endpoint))
          const result = yield* OutboundSender.send(request, refusing, sendLimits, connections)
          assert.strictEqual(result.errorClass, "blocked_ip", address)
          assert.include(result.refusal ?? "", address)
        }
        assert.deepStrictEqual(service.counts(), { sessions: 0, streams: 0, http1Requests: 0 })
        assert.lengthOf(service.log.delivered, 0)
      }).pipe(Effect.scoped),
  )
})
