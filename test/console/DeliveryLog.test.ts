/**
 * A subscription's delivery log in Chromium: real deliveries of several event types, states and
 * payloads (delivered ones created two hours ago, one dead, one pending), filtered through the
 * page's own form by state, by type, by time and by a payload path, each showing exactly the
 * expected rows; a path that cannot be read is said in the page, not a 500. The subscriptions
 * list shows the same subscription's health over 24 hours, sparkline figures included. Screenshots
 * of both pages land in test/artifacts/ (git-ignored).
 */
import { assert, layer } from "@effect/vitest"
import { Duration, Effect } from "effect"
import { SqlClient } from "effect/sql"
import { WebhookSubscriptions } from "../../src/webhooks/subscriptions/WebhookSubscriptions.ts"
import * as LoopbackServer from "../support/LoopbackServer.ts"
import * as TestWebhooks from "../support/TestWebhooks.ts"
import * as ConsoleBrowser from "./ConsoleBrowser.ts"

// A failed request waits an hour for its retry, so a failing delivery stays pending while the page is read.
const Live = TestWebhooks.layer({ retrySteps: [Duration.hours(1)] })

layer(Live, { excludeTestServices: true })("the delivery log", (it) => {
  it.effect(
    "ConsoleDeliveryLogFiltersAndSearches: the filter by state, by type, by time and the payload-path search each show exactly the expected deliveries; a bad path is an error message in the page",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        let status = 200
        const receiver = yield* LoopbackServer.http((_, response) => response.writeHead(status).end("answer"))
        const sub = yield* TestWebhooks.subscribe("log-owner", `${receiver.origin}/hook`, ["log-space"])
        const signals = yield* TestWebhooks.signals
        const seqOf = (e: { readonly firstSeq: bigint }) => String(e.firstSeq)
        const settled = (check: (ds: ReadonlyArray<{ state: string; attempts: number }>) => boolean) =>
          Effect.scoped(
            Effect.gen(function* () {
              yield* TestWebhooks.startDrainers(signals)
              yield* TestWebhooks.round()
              yield* signals.until(Effect.map(TestWebhooks.deliveries(sub.id), check))
            }),
          )

        // Delivered: three events, then made two hours old.
        const created42 = yield* TestWebhooks.append("log-space", { order: { id: 42 } }, "order.created")
        const paid42 = yield* TestWebhooks.append("log-space", { order: { id: 42 } }, "order.paid")
        const created7 = yield* TestWebhooks.append("log-space", { order: { id: 7 } }, "order.created")
        yield* settled((ds) => ds.length === 3 && ds.every((d) => d.state === "delivered"))
        yield* sql`UPDATE webhook_deliveries SET created_at = created_at - interval '2 hours'
                   WHERE subscription_id = ${sub.id}::uuid`
        // Dead: one fails, then the subscription is disabled; pending: after enabling, one more fails.
        status = 500
        const dead42 = yield* TestWebhooks.append("log-space", { order: { id: 42 } }, "order.created")
        yield* settled((ds) => ds.length === 4 && ds[3]!.attempts === 1)
        const webhooks = yield* WebhookSubscriptions
        yield* webhooks.disable(sub.id)
        yield* TestWebhooks.round()
        yield* webhooks.enable(sub.id)
        const refunded9 = yield* TestWebhooks.append("log-space", { order: { id: 9 } }, "order.refunded")
        yield* settled((ds) => ds.length === 5 && ds[4]!.attempts === 1 && ds[3]!.state === "dead")

        const { base, page } = yield* ConsoleBrowser.operator()
        const path = `/console/subscriptions/${sub.id}`
        const seqs = ConsoleBrowser.column(page, "#deliveries tbody tr", 2)
        const filter = (fill: Record<string, string>, select?: string) =>
          Effect.promise(async () => {
            await page.goto(`${base}${path}`)
            if (select !== undefined) await page.selectOption("form.filters select[name=state]", select)
            for (const [name, value] of Object.entries(fill)) await page.fill(`form.filters input[name=${name}]`, value)
            await Promise.all([page.waitForURL(/\?/), page.click("form.filters button[type=submit]")])
          })

        assert.strictEqual(yield* ConsoleBrowser.visit(page, base, path), 200)
        const all = [refunded9, dead42, created7, paid42, created42].map(seqOf)
        assert.deepStrictEqual(yield* seqs, all, "everything, newest first")
        yield* ConsoleBrowser.screenshot(page, "console-subscription.png")

        yield* filter({}, "delivered")
        assert.deepStrictEqual(yield* seqs, [created7, paid42, created42].map(seqOf))
        yield* filter({}, "dead")
        assert.deepStrictEqual(yield* seqs, [seqOf(dead42)])
        assert.include((yield* ConsoleBrowser.column(page, "#deliveries tbody tr", 4))[0], "dead (disabled:manual)")
        yield* filter({}, "pending")
        assert.deepStrictEqual(yield* seqs, [seqOf(refunded9)])

        yield* filter({ type: "order.created" })
        assert.deepStrictEqual(yield* seqs, [dead42, created7, created42].map(seqOf))

        const hourAgo = new Date(Date.now() - 3_600_000).toISOString().slice(0, 16)
        yield* filter({ since: hourAgo })
        assert.deepStrictEqual(yield* seqs, [refunded9, dead42].map(seqOf))
        yield* filter({ until: hourAgo })
        assert.deepStrictEqual(yield* seqs, [created7, paid42, created42].map(seqOf))

        yield* filter({ path: "$.order.id", value: "42" })
        assert.deepStrictEqual(yield* seqs, [dead42, paid42, created42].map(seqOf))
        yield* filter({ path: "$.order.id", value: "42", type: "order.created" })
        assert.deepStrictEqual(yield* seqs, [dead42, created42].map(seqOf))
        yield* filter({ path: "$.order.id", value: "1000" })
        assert.strictEqual(yield* Effect.promise(() => page.locator("#no-deliveries").count()), 1)

        for (const bad of ["$.order[", "order.id", "$.a'); DROP TABLE webhook_deliveries; --"]) {
          const response = yield* Effect.promise(async () => {
            await page.goto(`${base}${path}`)
            await page.fill("form.filters input[name=path]", bad)
            const [answer] = await Promise.all([
              page.waitForNavigation(),
              page.click("form.filters button[type=submit]"),
            ])
            return answer?.status()
          })
          assert.strictEqual(response, 200, bad)
          // biome-ignore lint/performance/useDomNodeTextContent: the visible text is what the test asserts on
          const alert = yield* Effect.promise(() => page.locator(".log [role=alert]").innerText())
          assert.match(alert, /payload path/i, bad)
          assert.strictEqual(yield* Effect.promise(() => page.locator("#deliveries").count()), 0)
        }

        // The list: 3 delivered and 2 failed attempts in the last 24 hours, the last one a 500.
        assert.strictEqual(yield* ConsoleBrowser.visit(page, base, "/console/subscriptions"), 200)
        const row = page.locator(`#subscriptions tr[data-subscription="${sub.id}"]`)
        // biome-ignore lint/performance/useDomNodeTextContent: the visible text is what the test asserts on
        const text = yield* Effect.promise(() => row.innerText())
        assert.include(text, `${receiver.origin}/hook`)
        assert.match(text, /log-owner\s+active\s+60\.0 %\s+\d+ ms\s+500\s+\d+ s/, text)
        const spark = row.locator("svg.spark")
        const figures = (name: string) =>
          Effect.promise(async () =>
            ((await spark.getAttribute(`data-${name}`)) ?? "").split(",").reduce((a, b) => a + Number(b), 0),
          )
        assert.strictEqual(yield* figures("delivered"), 3)
        assert.strictEqual(yield* figures("failed"), 2)
        yield* ConsoleBrowser.screenshot(page, "console-subscriptions.png")
        assert.match(
          yield* Effect.promise(() => spark.locator("title").textContent()).pipe(Effect.map(String)),
          /3 attempts delivered, 2 failed/,
        )
      }),
    120_000,
  )
})
