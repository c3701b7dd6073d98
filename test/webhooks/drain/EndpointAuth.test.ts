import { assert, layer } from "@effect/vitest"
import { Deferred, Duration, Effect, Fiber, Redacted } from "effect"
import { SqlClient } from "effect/sql"
import { TestClock } from "effect/testing"
import * as PermissionGrants from "../../../src/authz/PermissionGrants.ts"
import { webhookDeliver } from "../../../src/authz/Permissions.ts"
import * as OAuthClientCredentials from "../../../src/outbound/OAuthClientCredentials.ts"
import * as EndpointTokens from "../../../src/webhooks/drain/EndpointTokens.ts"
import * as WebhookDrainer from "../../../src/webhooks/drain/WebhookDrainer.ts"
import { type NewSubscription, WebhookSubscriptions } from "../../../src/webhooks/subscriptions/WebhookSubscriptions.ts"
import * as WebhookReceiver from "../../../testkit/WebhookReceiver.ts"
import * as EndpointServers from "../../support/EndpointServers.ts"
import * as TestWebhooks from "../../support/TestWebhooks.ts"

const Live = TestWebhooks.layer()

const clientSecret = "client-secret-0f3c9a7e5d1b"

/** A subscription of `owner` to `url` with the given credentials, its owner allowed on `space`. */
const subscribe = (space: string, url: string, credentials: Partial<NewSubscription> = {}) =>
  Effect.gen(function* () {
    yield* PermissionGrants.grant("owner-auth", webhookDeliver, space)
    return yield* (yield* WebhookSubscriptions).create({
      owner: "owner-auth",
      url,
      scope: [space],
      eventTypes: [],
      ...credentials,
    })
  })

const oauth = (tokenUrl: string) => ({
  auth: { type: "oauth2" as const, tokenUrl, clientId: "client-a", clientSecret: Redacted.make(clientSecret) },
})

const drainWith = TestWebhooks.drainOnce

const appendAndRound = (space: string, n: number) =>
  Effect.gen(function* () {
    for (let i = 0; i < n; i++) yield* TestWebhooks.append(space, { i })
    yield* TestWebhooks.round()
  })

const lastAttempts = (subscriptionId: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql<{ errorClass: string | null; status: number | null; body: string | null }>`
      SELECT a.error_class AS "errorClass", a.status, a.response_body AS body
      FROM webhook_attempts AS a JOIN webhook_deliveries AS d ON d.id = a.delivery_id
      WHERE d.subscription_id = ${subscriptionId}::uuid ORDER BY a.started_at, a.delivery_id`,
  )

layer(Live, { excludeTestServices: true })("Endpoint authentication", (it) => {
  it.effect(
    "OAuthClientCredentialsTokenReused: one token request per expiry however many deliveries, HTTP Basic client auth, refreshed shortly before expiry (TestClock)",
    () =>
      Effect.gen(function* () {
        yield* TestClock.setTime(Date.now())
        const tokens = yield* EndpointServers.tokenServer(3600)
        const receiver = yield* WebhookReceiver.start(() => ({ status: 200 }))
        const sub = yield* subscribe("oauth-a", receiver.url("/a"), oauth(tokens.url))
        const kind = yield* WebhookDrainer.makeWith({ linger: 0 })

        yield* appendAndRound("oauth-a", 6)
        assert.strictEqual(yield* drainWith(kind, sub.id), "done")
        assert.strictEqual(receiver.log.length, 6)
        assert.deepStrictEqual(new Set(receiver.log.map((r) => r.headers.authorization)), new Set(["Bearer tok-1"]))
        assert.strictEqual(tokens.requests.length, 1, "six deliveries, one token")
        const basic = `Basic ${Buffer.from(`client-a:${clientSecret}`).toString("base64")}`
        assert.strictEqual(tokens.requests[0]!.authorization, basic)
        assert.strictEqual(tokens.requests[0]!.body, "grant_type=client_credentials")

        // 3,500 s on: before the refresh point (3,600 s less a minute), the token is kept.
        yield* TestClock.adjust(Duration.seconds(3500))
        yield* appendAndRound("oauth-a", 3)
        assert.strictEqual(yield* drainWith(kind, sub.id), "done")
        assert.strictEqual(tokens.requests.length, 1, "still the first token")

        // Past the refresh point: one new token, used by every later delivery.
        yield* TestClock.adjust(Duration.seconds(60))
        yield* appendAndRound("oauth-a", 4)
        assert.strictEqual(yield* drainWith(kind, sub.id), "done")
        assert.strictEqual(tokens.requests.length, 2, "one request per expiry")
        assert.deepStrictEqual(
          receiver.log.slice(9).map((r) => r.headers.authorization),
          Array(4).fill("Bearer tok-2"),
        )
      }).pipe(Effect.scoped, Effect.provide(TestClock.layer())),
    60_000,
  )

  it.effect(
    "OAuthClientCredentialsTokenReused, single-flight: twenty callers while the request is out make one request",
    () =>
      Effect.gen(function* () {
        const answer = yield* Deferred.make<void>()
        let requests = 0
        const tokens = EndpointTokens.make()
        const request = Effect.gen(function* () {
          requests++
          yield* Deferred.await(answer)
          return { token: Redacted.make(`tok-${requests}`), lifetimeMillis: 60_000 }
        })
        const callers = yield* Effect.forkChild(
          Effect.all(
            Array.from({ length: 20 }, () => tokens.token("k", request)),
            { concurrency: "unbounded" },
          ),
        )
        yield* Effect.yieldNow
        yield* Deferred.succeed(answer, undefined)
        const got = yield* Fiber.join(callers)
        assert.strictEqual(requests, 1)
        assert.deepStrictEqual(new Set(got.map(Redacted.value)), new Set(["tok-1"]))
        // A 401 with tok-1 replaces it once; a caller still holding tok-1 afterwards gets tok-2 without asking.
        assert.strictEqual(Redacted.value(yield* tokens.token("k", request, got[0])), "tok-2")
        assert.strictEqual(Redacted.value(yield* tokens.token("k", request, got[1])), "tok-2")
        assert.strictEqual(requests, 2)
      }),
  )

  it.effect(
    "OAuthClientCredentialsTokenReused, 401: the endpoint refusing a token refreshes it once and the attempt is sent again",
    () =>
      Effect.gen(function* () {
        const tokens = yield* EndpointServers.tokenServer(3600)
        // The endpoint has revoked tok-1 (as after a key rotation at the IdP).
        const receiver = yield* WebhookReceiver.start((r) => ({
          status: r.headers.authorization === "Bearer tok-1" ? 401 : 200,
        }))
        const sub = yield* subscribe("oauth-401", receiver.url("/r"), oauth(tokens.url))
        yield* appendAndRound("oauth-401", 3)
        assert.strictEqual(yield* drainWith(yield* WebhookDrainer.makeWith({ linger: 0 }), sub.id), "done")
        assert.deepStrictEqual(
          receiver.log.map((r) => [r.headers.authorization, r.status]),
          [
            ["Bearer tok-1", 401],
            ["Bearer tok-2", 200],
            ["Bearer tok-2", 200],
            ["Bearer tok-2", 200],
          ],
        )
        assert.strictEqual(tokens.requests.length, 2)
        const attempts = yield* lastAttempts(sub.id)
        assert.deepStrictEqual(
          attempts.map((a) => a.status),
          [200, 200, 200],
          "the 401 and its retry are one attempt",
        )
      }).pipe(Effect.scoped),
  )

  it.effect(
    "OAuthTokenUrlIsSsrfChecked: a token URL into the private network is refused at input, and at delivery nothing is dialed; the attempt records why",
    () =>
      Effect.gen(function* () {
        const webhooks = yield* WebhookSubscriptions
        const receiver = yield* WebhookReceiver.start(() => ({ status: 200 }))
        for (const tokenUrl of [
          "https://10.0.0.7/token",
          "https://169.254.169.254/latest/meta-data",
          "http://example.com/token",
          "ftp://127.0.0.1/token",
        ]) {
          const refused = yield* Effect.flip(subscribe("ssrf", receiver.url("/s"), oauth(tokenUrl)))
          assert.strictEqual(refused._tag, "InvalidEndpointCredentials", tokenUrl)
          if (refused._tag === "InvalidEndpointCredentials") {
            assert.strictEqual(refused.field, "auth.tokenUrl")
            assert.strictEqual(refused.reason, "UnsafeTokenUrl")
          }
        }
        const written = (yield* webhooks.list({ owner: "owner-auth", limit: 500 })).subscriptions
        assert.isFalse(
          written.some((w) => w.scope.includes("ssrf")),
          "nothing written",
        )

        // At delivery: the URL is judged again (here a row changed behind the API's back).
        const tokens = yield* EndpointServers.tokenServer(3600)
        const sub = yield* subscribe("ssrf", receiver.url("/s"), oauth(tokens.url))
        const sql = yield* SqlClient.SqlClient
        yield* sql`UPDATE webhook_subscriptions SET auth_token_url = 'https://10.0.0.7/token' WHERE id = ${sub.id}::uuid`
        yield* appendAndRound("ssrf", 1)
        assert.strictEqual(yield* drainWith(yield* WebhookDrainer.makeWith({ linger: 0 }), sub.id), "snoozed")
        assert.strictEqual(receiver.log.length, 0, "no token, no request")
        const [attempt] = yield* lastAttempts(sub.id)
        assert.strictEqual(attempt!.errorClass, "auth_token")
        assert.include(attempt!.body, "Unreachable")
        assert.include(attempt!.body, "10.0.0.7 is private")

        // The checked dialer too: under a policy without loopback, a host name resolving to it is not dialed.
        const strict = { allowHttpLoopback: false, allowCidrs: [], allowHosts: [] }
        const viaName = yield* Effect.flip(
          OAuthClientCredentials.fetchToken(
            {
              tokenUrl: `https://localhost:${new URL(tokens.url).port}/token`,
              clientId: "c",
              clientSecret: Redacted.make(clientSecret),
              scope: null,
            },
            strict,
          ),
        )
        assert.strictEqual(viaName.reason, "Unreachable")
        assert.include(viaName.detail, "blocked_ip")
        assert.strictEqual(tokens.requests.length, 0, "the token server was never reached")
      }).pipe(Effect.scoped),
  )

  it.effect(
    "MtlsEndpointGetsClientCert: each subscription presents its own client certificate; without one the handshake fails; bad input is refused",
    () =>
      Effect.gen(function* () {
        const pki = yield* EndpointServers.pki
        const endpoint = yield* EndpointServers.tlsEndpoint(pki, true)
        const withCa = { ca: pki.serverCa }
        const a = yield* subscribe("mtls", endpoint.url("/a"), {
          ...withCa,
          mtls: { cert: pki.clientA.cert, key: Redacted.make(pki.clientA.key) },
        })
        const b = yield* subscribe("mtls", endpoint.url("/b"), {
          ...withCa,
          mtls: { cert: pki.clientB.cert, key: Redacted.make(pki.clientB.key) },
        })
        const none = yield* subscribe("mtls", endpoint.url("/none"), withCa)
        yield* appendAndRound("mtls", 3)
        // One drainer kind for all three, as in a worker.
        const kind = yield* WebhookDrainer.makeWith({ linger: 0 })
        assert.strictEqual(yield* drainWith(kind, a.id), "done")
        assert.strictEqual(yield* drainWith(kind, b.id), "done")
        assert.strictEqual(yield* drainWith(kind, none.id), "snoozed")
        const by = (path: string) => endpoint.arrivals.filter((r) => r.path === path).map((r) => r.client)
        assert.deepStrictEqual(by("/a"), Array(3).fill(EndpointServers.fingerprint(pki.clientA.cert)))
        assert.deepStrictEqual(by("/b"), Array(3).fill(EndpointServers.fingerprint(pki.clientB.cert)))
        assert.deepStrictEqual(by("/none"), [], "no client certificate: no request got through")
        const [failed] = yield* lastAttempts(none.id)
        assert.oneOf(failed!.errorClass, ["tls", "connect"])

        const refusal = (mtls: { cert: string; key: string }) =>
          Effect.flip(
            subscribe("mtls", endpoint.url("/x"), { mtls: { cert: mtls.cert, key: Redacted.make(mtls.key) } }),
          )
        const mismatch = yield* refusal({ cert: pki.clientA.cert, key: pki.clientB.key })
        assert.deepInclude(mismatch, {
          _tag: "InvalidEndpointCredentials",
          field: "mtls.key",
          reason: "KeyDoesNotMatch",
        })
        const badPem = yield* refusal({
          cert: "-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----",
          key: pki.clientA.key,
        })
        assert.deepInclude(badPem, { _tag: "InvalidEndpointCredentials", field: "mtls.cert", reason: "BadCertificate" })
        const badKey = yield* refusal({
          cert: pki.clientA.cert,
          key: "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----",
        })
        assert.deepInclude(badKey, { _tag: "InvalidEndpointCredentials", field: "mtls.key", reason: "BadKey" })
        assert.notInclude(JSON.stringify(mismatch), pki.clientB.key.split("\n")[1]!, "the key is never quoted")
      }).pipe(Effect.scoped),
    60_000,
  )

  it.effect(
    "CustomCaTrusted: an endpoint behind a private PKI is reached with its CA; without it, or with another CA, the handshake is refused",
    () =>
      Effect.gen(function* () {
        const pki = yield* EndpointServers.pki
        const endpoint = yield* EndpointServers.tlsEndpoint(pki, false)
        const trusted = yield* subscribe("ca", endpoint.url("/trusted"), { ca: pki.serverCa })
        const system = yield* subscribe("ca", endpoint.url("/system"))
        const other = yield* subscribe("ca", endpoint.url("/other"), { ca: pki.otherCa })
        yield* appendAndRound("ca", 2)
        const kind = yield* WebhookDrainer.makeWith({ linger: 0 })
        assert.strictEqual(yield* drainWith(kind, trusted.id), "done")
        assert.strictEqual(yield* drainWith(kind, system.id), "snoozed")
        assert.strictEqual(yield* drainWith(kind, other.id), "snoozed")
        assert.deepStrictEqual(
          endpoint.arrivals.map((r) => r.path),
          ["/trusted", "/trusted"],
        )
        for (const id of [system.id, other.id]) {
          const [failed] = yield* lastAttempts(id)
          assert.strictEqual(failed!.errorClass, "tls")
        }
        const badCa = yield* Effect.flip(subscribe("ca", endpoint.url("/bad"), { ca: "not a certificate" }))
        assert.deepInclude(badCa, { _tag: "InvalidEndpointCredentials", field: "ca", reason: "BadCa" })

        // Removed by an update: the system's roots again, so the private endpoint is refused.
        const webhooks = yield* WebhookSubscriptions
        assert.isFalse((yield* webhooks.update(trusted.id, { ca: null })).ca)
        assert.isTrue((yield* webhooks.get(other.id)).ca)
      }).pipe(Effect.scoped),
    60_000,
  )
})
