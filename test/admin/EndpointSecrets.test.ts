import { assert, layer } from "@effect/vitest"
import { Effect, Logger, Option, Redacted, References } from "effect"
import { SqlClient } from "effect/sql"
import { AdminAuth } from "../../src/admin/AdminAuth.ts"
import * as StatusPage from "../../src/admin/StatusPage.ts"
import * as PermissionGrants from "../../src/authz/PermissionGrants.ts"
import { webhookDeliver } from "../../src/authz/Permissions.ts"
import * as WebhookDrainer from "../../src/webhooks/drain/WebhookDrainer.ts"
import * as EndpointServers from "../support/EndpointServers.ts"
import * as TestAdmin from "../support/TestAdmin.ts"
import * as TestWebhooks from "../support/TestWebhooks.ts"

const Live = TestWebhooks.layer()

const token = "endpoint-secrets-admin-token-0123456789"
const operator = AdminAuth.token(Option.some(Redacted.make(token)))

const firstSecret = "first-client-secret-7d2a9c41e0"
const secondSecret = "second-client-secret-b83f16c5aa"
const accessToken = (n: number) => `access-token-${n}-5e1c0b9d7f3a2468`

layer(Live, { excludeTestServices: true })("endpoint secrets", (it) => {
  it.effect(
    "EndpointSecretsNeverEchoed: no admin response, log line (debug included) or status page holds a client secret, a client key or a token, though the token server echoes the secret in its refusal",
    () =>
      Effect.gen(function* () {
        const lines: Array<string> = []
        const pki = yield* EndpointServers.pki
        // The first token request is refused with the secret in the refusal (servers do this);
        // the later ones get a token.
        const sentSecret = (authorization: string | undefined) =>
          decodeURIComponent(
            Buffer.from((authorization ?? "").slice(6), "base64")
              .toString()
              .split(":")[1] ?? "",
          )
        const tokens = yield* EndpointServers.tokenServer(3600, (n, request) =>
          n === 1
            ? {
                status: 401,
                body: JSON.stringify({
                  error: "invalid_client",
                  error_description: `bad secret ${sentSecret(request.authorization)}`,
                }),
              }
            : {
                status: 200,
                body: JSON.stringify({ access_token: accessToken(n), token_type: "bearer", expires_in: 3600 }),
              },
        )
        const endpoint = yield* EndpointServers.tlsEndpoint(pki, true)
        const keyLines = pki.clientA.key.split("\n").filter((l) => l !== "" && !l.startsWith("-----"))
        const secrets = [firstSecret, secondSecret, accessToken(2), accessToken(3), ...keyLines]
        const holdsNone = (what: string, text: string) => {
          for (const secret of secrets) assert.notInclude(text, secret, `${what} holds a secret`)
        }

        const base = yield* TestAdmin.serve(operator)
        const api = TestAdmin.client(base, { token })
        yield* PermissionGrants.grant("ann", webhookDeliver, "sealed")
        const created = yield* api.post("/v1/subscriptions", {
          owner: "ann",
          url: endpoint.url("/hook"),
          scope: ["sealed"],
          auth: { type: "oauth2", tokenUrl: tokens.url, clientId: "client-ann", clientSecret: firstSecret },
          mtls: { cert: pki.clientA.cert, key: pki.clientA.key },
          ca: pki.serverCa,
        })
        assert.strictEqual(created.status, 201, JSON.stringify(created.body))
        const id: string = created.body.subscription.id
        assert.deepInclude(created.body.subscription, {
          auth: { type: "oauth2", tokenUrl: tokens.url, clientId: "client-ann", scope: null },
          mtls: true,
          ca: true,
        })
        const answers = [
          created,
          yield* api.get(`/v1/subscriptions/${id}`),
          yield* api.get("/v1/subscriptions"),
          yield* api.patch(`/v1/subscriptions/${id}`, {
            auth: { type: "oauth2", tokenUrl: tokens.url, clientId: "client-ann", clientSecret: secondSecret },
          }),
          // A refusal names the field, never the key it refused.
          yield* api.patch(`/v1/subscriptions/${id}`, { mtls: { cert: pki.clientB.cert, key: pki.clientA.key } }),
          yield* api.patch(`/v1/subscriptions/${id}`, {
            auth: { type: "oauth2", tokenUrl: tokens.url, clientId: "c", clientSecret: "" },
          }),
        ]
        assert.deepStrictEqual(
          answers.map((a) => a.status),
          [201, 200, 200, 200, 400, 400],
        )
        assert.deepInclude(answers[4]!.body, { _tag: "InvalidEndpointCredentials", field: "mtls.key" })
        assert.deepInclude(answers[5]!.body, { _tag: "InvalidEndpointCredentials", field: "auth.clientSecret" })
        for (const [i, a] of answers.entries()) holdsNone(`admin answer ${i}`, JSON.stringify(a.body))
        assert.notProperty(answers[3]!.body.auth, "clientSecret")

        // At rest: sealed, not readable in a dump.
        const sql = yield* SqlClient.SqlClient
        const [row] = yield* sql<{
          text: string
        }>`SELECT row_to_json(s)::text AS text FROM webhook_subscriptions AS s WHERE id = ${id}::uuid`
        holdsNone("the stored row", row!.text)

        // Deliveries, logged at debug level: the refusal echoing a secret, then a token and mTLS.
        const drain = Effect.gen(function* () {
          const kind = yield* WebhookDrainer.makeWith({ linger: 0 })
          const run = TestWebhooks.drainOnce(kind, id)
          yield* TestWebhooks.append("sealed", { i: 1 })
          yield* TestWebhooks.round()
          assert.strictEqual(yield* run, "snoozed", "no token: nothing sent")
          assert.strictEqual(yield* run, "done")
        }).pipe(
          Effect.provide(
            Logger.layer(
              [
                Logger.make(({ message }) => {
                  lines.push((Array.isArray(message) ? message : [message]).map(String).join(" "))
                }),
              ],
              { mergeWithExisting: true },
            ),
          ),
          Effect.provideService(References.MinimumLogLevel, "Debug"),
        )
        yield* drain
        assert.strictEqual(tokens.requests.length, 2)
        assert.deepStrictEqual(
          endpoint.arrivals.map((a) => a.client),
          [EndpointServers.fingerprint(pki.clientA.cert)],
        )
        assert.isTrue(
          lines.some((l) => l.includes("no OAuth2 token")),
          lines.join("\n"),
        )
        for (const line of lines) holdsNone("a log line", line)

        const page = yield* StatusPage.render({ attempts: 10 })
        assert.include(page, "auth_token")
        assert.include(page, "&lt;redacted&gt;", "the echoed secret shows as redacted")
        holdsNone("the status page", page)
      }).pipe(Effect.scoped),
    60_000,
  )
})
