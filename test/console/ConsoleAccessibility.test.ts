/**
 * Every console page in Chromium under axe-core (the rules of WCAG 2 A and AA): no serious or
 * critical violation, for the operator and for a portal session, with data on the pages (a
 * subscription with a delivered and a failed attempt). The first Tab lands on the skip link.
 */
import { readFileSync } from "node:fs"
import { createRequire } from "node:module"
import { assert, layer } from "@effect/vitest"
import { Effect } from "effect"
import { SqlClient } from "effect/sql"
import type { Page } from "playwright-core"
import * as LoopbackServer from "../support/LoopbackServer.ts"
import * as TestAdmin from "../support/TestAdmin.ts"
import * as TestWebhooks from "../support/TestWebhooks.ts"
import * as ConsoleBrowser from "./ConsoleBrowser.ts"

const axeSource = readFileSync(createRequire(import.meta.url).resolve("axe-core/axe.min.js"), "utf8")

interface Violation {
  readonly id: string
  readonly impact: string | null
  readonly help: string
  readonly nodes: ReadonlyArray<{ readonly target: ReadonlyArray<string> }>
}

/** axe-core's serious and critical violations on the page as it is (evaluated past the CSP, as a tool does). */
const violations = (page: Page) =>
  Effect.promise(async () => {
    await page.evaluate(axeSource)
    const found = (await page.evaluate(
      "axe.run(document, { runOnly: { type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa'] } }).then((r) => r.violations)",
    )) as ReadonlyArray<Violation>
    return found
      .filter((v) => v.impact === "serious" || v.impact === "critical")
      .map((v) => `${v.id} (${v.impact}): ${v.help} at ${v.nodes.map((n) => n.target.join(" ")).join(", ")}`)
  })

layer(TestWebhooks.layer(), { excludeTestServices: true })("console accessibility", (it) => {
  it.effect(
    "ConsoleAccessibility: axe-core finds no serious or critical violation on any console page, for the operator and in the portal; Tab reaches the skip link first; no page has a failed load or a script error",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const base = yield* ConsoleBrowser.serve
        let calls = 0
        const receiver = yield* LoopbackServer.http((_request, response) => {
          calls += 1
          response.writeHead(calls === 1 ? 500 : 200).end(calls === 1 ? "not yet" : "ok")
        })
        const subscription = yield* TestWebhooks.subscribe("axe-owner", `${receiver.origin}/hook`, ["axe-space"])
        yield* TestWebhooks.append("axe-space", { i: 1 })
        yield* TestWebhooks.round()
        const signals = yield* TestWebhooks.signals
        yield* TestWebhooks.startDrainers(signals)
        yield* signals.until(
          Effect.map(sql<{ n: number }>`SELECT count(*)::int AS n FROM webhook_attempts`, (rows) => rows[0]!.n >= 1),
        )
        const [delivery] = yield* sql<{ id: bigint }>`SELECT id FROM webhook_deliveries LIMIT 1`

        const { page } = yield* ConsoleBrowser.open
        // What a user's devtools would show on any page: a load that failed, a script's error.
        const failures: Array<string> = []
        page.on("response", (r) => {
          if (r.status() >= 400) failures.push(`${r.status()} ${new URL(r.url()).pathname}`)
        })
        page.on("pageerror", (e) => failures.push(String(e)))
        page.on("console", (m) => {
          if (m.type() === "error") failures.push(`${m.text()} (${m.location().url})`)
        })
        yield* ConsoleBrowser.visit(page, base, "/console/login")
        const found: Record<string, ReadonlyArray<string>> = { "/console/login": yield* violations(page) }
        yield* ConsoleBrowser.signIn(page, base, "/console/overview")

        yield* Effect.promise(() => page.keyboard.press("Tab"))
        assert.strictEqual(
          yield* Effect.promise(() => page.evaluate("document.activeElement.className")),
          "skip",
          "the first Tab reaches the skip link",
        )
        const pages = [
          "/console/overview",
          "/console/subscriptions",
          `/console/subscriptions/${subscription.id}`,
          `/console/deliveries/${delivery!.id}`,
          "/console/push",
          "/console/jobs",
          "/console/event-types",
        ]
        for (const path of pages) {
          const response = yield* Effect.promise(() => page.goto(`${base}${path}`))
          assert.strictEqual(response!.status(), 200, path)
          found[path] = yield* violations(page)
        }
        const link = yield* TestAdmin.call(base, "POST", "/v1/portal-links", {
          token: ConsoleBrowser.token,
          body: { principal: "axe-owner" },
        })
        yield* Effect.promise(() => page.goto(link.body.url))
        for (const path of [
          "/console/subscriptions",
          `/console/subscriptions/${subscription.id}`,
          "/console/event-types",
        ]) {
          yield* Effect.promise(() => page.goto(`${base}${path}`))
          found[`portal ${path}`] = yield* violations(page)
        }
        assert.deepStrictEqual(
          Object.entries(found).filter(([, v]) => v.length > 0),
          [],
          "no serious or critical violation anywhere",
        )
        assert.isAtLeast(Object.keys(found).length, 11)
        assert.deepStrictEqual(failures, [], "no failed load and no script error")
      }),
  )
})
