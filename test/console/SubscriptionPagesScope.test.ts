/**
 * The subscription pages as a principal sees them through a portal link: the list holds its own
 * subscriptions only; another principal's subscription and delivery answer exactly as ones that
 * do not exist (404, the same page), and its own answer 200.
 */
import { assert, layer } from "@effect/vitest"
import { Effect } from "effect"
import { SqlClient } from "effect/sql"
import * as TestAdmin from "../support/TestAdmin.ts"
import * as TestWebhooks from "../support/TestWebhooks.ts"
import * as ConsoleBrowser from "./ConsoleBrowser.ts"

layer(TestWebhooks.layer(), { excludeTestServices: true })("the subscription pages of a principal", (it) => {
  it.effect(
    "ConsoleSubscriptionPagesScopeToPrincipal: a principal lists only its own subscriptions; another's subscription and delivery are a 404 like ones that do not exist",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const mine = yield* TestWebhooks.subscribe("alice", "http://127.0.0.1:9/alice", ["space-a"])
        const theirs = yield* TestWebhooks.subscribe("bob", "http://127.0.0.1:9/bob", ["space-b"])
        yield* TestWebhooks.append("space-a", { i: 1 })
        yield* TestWebhooks.append("space-b", { i: 2 })
        yield* TestWebhooks.round()
        const deliveryOf = (id: string) =>
          Effect.map(
            sql<{ id: string }>`SELECT id::text AS id FROM webhook_deliveries WHERE subscription_id = ${id}::uuid`,
            (rows) => rows[0]!.id,
          )
        const [myDelivery, theirDelivery] = [yield* deliveryOf(mine.id), yield* deliveryOf(theirs.id)]

        const { base, page } = yield* ConsoleBrowser.operator()
        const link = yield* TestAdmin.call(base, "POST", "/v1/portal-links", {
          token: ConsoleBrowser.token,
          body: { principal: "alice" },
        })
        assert.strictEqual(link.status, 200, JSON.stringify(link.body))
        yield* Effect.promise(() => page.context().clearCookies())
        yield* Effect.promise(() => page.goto(`${base}${link.body.path}`))

        assert.strictEqual(yield* ConsoleBrowser.visit(page, base, "/console/subscriptions"), 200)
        const listed = yield* Effect.promise(() =>
          page
            .locator("#subscriptions tbody tr")
            .evaluateAll((rows) => rows.map((r) => r.getAttribute("data-subscription"))),
        )
        assert.deepStrictEqual(listed, [mine.id])

        // biome-ignore lint/performance/useDomNodeTextContent: the visible text is what the test asserts on
        const shown = () => Effect.promise(() => page.locator("main").innerText())
        const missing = "0b9f6a2e-3c1d-4c5b-9a57-3f1f0f6c2d11"
        const answers: Record<string, { status: number | undefined; text: string }> = {}
        for (const path of [
          `/console/subscriptions/${mine.id}`,
          `/console/subscriptions/${theirs.id}`,
          `/console/subscriptions/${missing}`,
          `/console/deliveries/${myDelivery}`,
          `/console/deliveries/${theirDelivery}`,
          "/console/deliveries/99999999",
        ]) {
          answers[path] = { status: yield* ConsoleBrowser.visit(page, base, path), text: yield* shown() }
        }
        const at = (path: string) => answers[path]!
        assert.strictEqual(at(`/console/subscriptions/${mine.id}`).status, 200)
        assert.strictEqual(at(`/console/deliveries/${myDelivery}`).status, 200)
        assert.deepStrictEqual(at(`/console/subscriptions/${theirs.id}`), at(`/console/subscriptions/${missing}`))
        assert.strictEqual(at(`/console/subscriptions/${theirs.id}`).status, 404)
        assert.deepStrictEqual(at(`/console/deliveries/${theirDelivery}`), at("/console/deliveries/99999999"))
        assert.strictEqual(at(`/console/deliveries/${theirDelivery}`).status, 404)
        assert.notInclude(at(`/console/deliveries/${theirDelivery}`).text, "bob")
      }),
    120_000,
  )
})
