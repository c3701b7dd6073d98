/**
 * The tenant portal is one principal's: opened from a portal link in Chromium, it shows that
 * principal's subscriptions and deliveries, and another's are a 404 in the pages and in the API
 * calls the pages make, even with the session's CSRF token; the operator's pages are a 404 too.
 */
import { assert, layer } from "@effect/vitest"
import { Effect, Option, Redacted } from "effect"
import { SqlClient } from "effect/sql"
import { AdminAuth } from "../../src/admin/AdminAuth.ts"
import * as Chromium from "../support/Chromium.ts"
import * as TestAdmin from "../support/TestAdmin.ts"
import * as TestWebhooks from "../support/TestWebhooks.ts"

const token = "portal-token"

const deliveryOf = (subscription: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<{ id: bigint }>`SELECT id FROM webhook_deliveries WHERE subscription_id = ${subscription}::uuid LIMIT 1`,
      (rows) => String(rows[0]!.id),
    ),
  )

layer(TestWebhooks.layer(), { excludeTestServices: true })("the tenant portal", (it) => {
  it.effect(
    "PortalLinkScopesToPrincipal: a portal session sees its own subscriptions and deliveries; another principal's are a 404 in the page and through its API calls, and the operator's pages are a 404",
    () =>
      Effect.gen(function* () {
        const base = yield* TestAdmin.serve(AdminAuth.token(Option.some(Redacted.make(token))))
        const mine = yield* TestWebhooks.subscribe("tenant-a", "http://127.0.0.1:9/mine", ["space-a"])
        const theirs = yield* TestWebhooks.subscribe("tenant-b", "http://127.0.0.1:9/theirs", ["space-b"])
        yield* TestWebhooks.append("space-a", { i: 1 })
        yield* TestWebhooks.append("space-b", { i: 2 })
        yield* TestWebhooks.round()
        const myDelivery = yield* deliveryOf(mine.id)
        const theirDelivery = yield* deliveryOf(theirs.id)

        const link = yield* TestAdmin.call(base, "POST", "/v1/portal-links", { token, body: { principal: "tenant-a" } })
        const browser = yield* Chromium.launch
        const page = yield* Effect.promise(() => browser.newPage())
        yield* Effect.promise(() => page.goto(link.body.url))
        assert.strictEqual(new URL(page.url()).pathname, "/console/subscriptions")
        const listed = (yield* Effect.promise(() => page.locator("main").textContent())) ?? ""
        assert.include(listed, "http://127.0.0.1:9/mine")
        assert.notInclude(listed, "http://127.0.0.1:9/theirs")
        assert.include((yield* Effect.promise(() => page.locator("header").textContent())) ?? "", "tenant-a")

        const status = (path: string) => Effect.promise(async () => (await page.goto(`${base}${path}`))!.status())
        assert.strictEqual(yield* status(`/console/subscriptions/${mine.id}`), 200)
        assert.strictEqual(yield* status(`/console/deliveries/${myDelivery}`), 200)
        for (const path of [
          `/console/subscriptions/${theirs.id}`,
          `/console/deliveries/${theirDelivery}`,
          "/console/overview",
          "/console/jobs",
          "/console/push",
        ]) {
          assert.strictEqual(yield* status(path), 404, path)
        }
        const missing = yield* status("/console/subscriptions/00000000-0000-0000-0000-000000000000")
        assert.strictEqual(missing, 404, "one that does not exist reads the same")

        // The page's own API calls, with the session and its CSRF token, as console.js makes them.
        yield* Effect.promise(() => page.goto(`${base}/console/subscriptions`))
        const csrf = yield* Effect.promise(() => page.locator('meta[name="bothy-csrf"]').getAttribute("content"))
        const api = (method: string, path: string) =>
          Effect.promise(() =>
            page.evaluate(
              async (call) =>
                (await fetch(call.path, { method: call.method, headers: { "x-bothy-csrf": call.csrf } })).status,
              { method, path, csrf: csrf ?? "" },
            ),
          )
        assert.strictEqual(yield* api("GET", `/v1/subscriptions/${theirs.id}`), 404)
        assert.strictEqual(yield* api("GET", `/v1/deliveries/${theirDelivery}`), 404)
        assert.strictEqual(yield* api("GET", `/v1/subscriptions/${theirs.id}/deliveries`), 404)
        assert.strictEqual(yield* api("POST", `/v1/subscriptions/${theirs.id}/disable`), 404)
        assert.strictEqual(yield* api("POST", `/v1/deliveries/${theirDelivery}/resend`), 404)
        assert.strictEqual(yield* api("GET", "/v1/jobs/counts"), 403)
        assert.strictEqual(yield* api("GET", `/v1/subscriptions/${mine.id}`), 200)
        assert.strictEqual(yield* api("POST", `/v1/subscriptions/${mine.id}/disable`), 200, "its own, with the token")
        const states = yield* TestAdmin.call(base, "GET", "/v1/subscriptions?limit=10", { token })
        assert.deepStrictEqual(
          Object.fromEntries(states.body.items.map((s: { url: string; state: string }) => [s.url, s.state])),
          { "http://127.0.0.1:9/mine": "disabled", "http://127.0.0.1:9/theirs": "active" },
        )
      }),
  )
})
