/**
 * The event-type catalog in the console: a type the host added through the admin API, with a
 * schema and an example, appears with its example pretty-printed, beside bothy's built-in types,
 * to the operator and to a principal who came in through a portal link. The example's text that
 * looks like markup is shown as text.
 */
import { assert, layer } from "@effect/vitest"
import { Effect } from "effect"
import type { Page } from "playwright-core"
import * as TestAdmin from "../support/TestAdmin.ts"
import * as TestWebhooks from "../support/TestWebhooks.ts"
import * as ConsoleBrowser from "./ConsoleBrowser.ts"

const example = { order: { id: "o-17", total: 42.5 }, note: `<img src=x id="injected">` }

/** Asserts what `page` (open on the catalog) shows of `order.paid`, as `who`. */
const shows = (page: Page, who: "operator" | "principal") =>
  Effect.gen(function* () {
    const type = page.locator(`article[data-type="order.paid"]`)
    // biome-ignore lint/performance/useDomNodeTextContent: the visible text is what the test asserts on
    const shown = yield* Effect.promise(() => type.locator("pre.example").innerText())
    assert.deepStrictEqual(JSON.parse(shown), example, `${who}: the example`)
    // Pretty-printed (in the key order jsonb keeps).
    assert.strictEqual(shown, JSON.stringify(JSON.parse(shown), null, 2), who)
    // biome-ignore lint/performance/useDomNodeTextContent: the visible text is what the test asserts on
    assert.include(yield* Effect.promise(() => type.innerText()), "An order was paid in full.")
    // The schema sits in a closed <details>: its text is there, not shown.
    const schema = yield* Effect.promise(() => type.locator("pre.schema").textContent())
    assert.deepStrictEqual(JSON.parse(schema ?? ""), { type: "object", required: ["order"] }, who)
    assert.strictEqual(yield* Effect.promise(() => page.locator("#injected").count()), 0, `${who}: text, not markup`)
    const builtIn = yield* Effect.promise(() => page.locator(`article[data-type="bothy.delivery.dead"]`).count())
    assert.strictEqual(builtIn, 1, `${who}: the built-in types too`)
    // biome-ignore lint/performance/useDomNodeTextContent: the visible text is what the test asserts on
    const viewer = yield* Effect.promise(() => page.locator("header .who").innerText())
    assert.strictEqual(viewer, who === "operator" ? "operator" : "portal of tenant-a")
  })

layer(TestWebhooks.layer(), { excludeTestServices: true })("the console's event types", (it) => {
  it.effect(
    "ConsoleEventTypesShowExamples: a catalog type with an example appears with its example and schema, to the operator and to a principal through a portal link",
    () =>
      Effect.gen(function* () {
        const base = yield* ConsoleBrowser.serve
        const api = TestAdmin.client(base, { token: ConsoleBrowser.token })
        const put = yield* TestAdmin.call(base, "PUT", "/v1/event-types/order.paid", {
          token: ConsoleBrowser.token,
          body: { description: "An order was paid in full.", schema: { type: "object", required: ["order"] }, example },
        })
        assert.strictEqual(put.status, 200, JSON.stringify(put.body))
        const link = yield* api.post("/v1/portal-links", { principal: "tenant-a" })
        assert.strictEqual(link.status, 200, JSON.stringify(link.body))

        // One browser: the operator's session first, then the portal link's, which replaces it.
        const { browser, page } = yield* ConsoleBrowser.open
        yield* ConsoleBrowser.signIn(page, base, "/console/event-types")
        yield* shows(page, "operator")
        // The link sets the principal's session and sends it to its subscriptions (whatever that
        // page answers here, the session is set by the link's own answer).
        const tab = yield* Effect.promise(() => browser.newPage())
        yield* Effect.promise(() => tab.goto(link.body.url).catch(() => null))
        const portal = yield* Effect.promise(() => browser.newPage())
        const response = yield* Effect.promise(() => portal.goto(`${base}/console/event-types`))
        assert.strictEqual(response?.status(), 200)
        yield* shows(portal, "principal")
        yield* ConsoleBrowser.screenshot(portal, "console-event-types.png")
        // The overview is the operator's: a 404 to the principal.
        const overview = yield* Effect.promise(() => portal.goto(`${base}/console/overview`))
        assert.strictEqual(overview?.status(), 404)
      }).pipe(Effect.scoped),
    120_000,
  )
})
