/**
 * The overview as an operator sees it: the test makes known figures (events appended, deliveries
 * that went out, attempts a receiver failed), lets the real drainers deliver them, logs a Chromium
 * in and reads back what the charts hold (`window.bothyCharts`, what uPlot drew). Its screenshot
 * goes to test/artifacts/ (docs/img/console-overview.png is one, copied by hand: a test run leaves
 * the checkout as it was).
 */
import { assert, layer } from "@effect/vitest"
import { Duration, Effect } from "effect"
import { SqlClient } from "effect/sql"
import * as LoopbackServer from "../support/LoopbackServer.ts"
import * as TestWebhooks from "../support/TestWebhooks.ts"
import * as ConsoleBrowser from "./ConsoleBrowser.ts"

const total = (chart: ConsoleBrowser.Chart, label: string) =>
  chart.data[chart.series.indexOf(label) + 1]!.reduce<number>((a, v) => a + (v ?? 0), 0)

// Quick retries, so the failed attempts are followed by the ones that deliver within the test.
layer(TestWebhooks.layer({ retrySteps: [Duration.millis(20)] }), { excludeTestServices: true })(
  "the console's overview",
  (it) => {
    it.effect(
      "ConsoleOverviewDrawsCharts: the charts hold the events appended, the deliveries made, the attempts failed and their latency",
      () =>
        Effect.gen(function* () {
          const sql = yield* SqlClient.SqlClient
          const events = 7
          const matching = 5 // of them, the type the subscription takes
          const failures = 3 // the receiver's first answers: 500
          let answered = 0
          const receiver = yield* LoopbackServer.http((_request, response) => {
            answered++
            response.writeHead(answered <= failures ? 500 : 200).end(answered <= failures ? "not yet" : "ok")
          })
          const sub = yield* TestWebhooks.subscribe(
            "overview-owner",
            `${receiver.origin}/hook`,
            ["ov"],
            ["item.created"],
          )
          for (let i = 0; i < events; i++) {
            yield* TestWebhooks.append("ov", { i }, i < matching ? "item.created" : "item.other")
          }
          yield* TestWebhooks.round()
          yield* Effect.gen(function* () {
            const signals = yield* TestWebhooks.signals
            yield* TestWebhooks.startDrainers(signals)
            yield* TestWebhooks.deliveredThrough(signals, sub.id, matching - 1)
          }).pipe(Effect.scoped)
          const [made] = yield* sql<{ events: number; delivered: number; failed: number }>`
            SELECT (SELECT count(*)::int FROM event_log) AS events,
                   (SELECT count(*)::int FROM webhook_deliveries WHERE state = 'delivered') AS delivered,
                   (SELECT count(*)::int FROM webhook_attempts WHERE status = 500) AS failed`
          assert.deepStrictEqual(made, { events, delivered: matching, failed: failures }, "the figures made")

          const base = yield* ConsoleBrowser.serve
          const { page } = yield* ConsoleBrowser.open
          yield* Effect.promise(() => page.setViewportSize({ width: 1280, height: 900 }))
          yield* ConsoleBrowser.signIn(page, base, "/console/overview")
          const byName = yield* ConsoleBrowser.drawnCharts(page)
          assert.closeTo(total(byName.events!, "events/s") * 60, events, 1e-9, "events appended")
          assert.strictEqual(total(byName.deliveries!, "delivered"), matching)
          assert.strictEqual(total(byName.deliveries!, "failed attempts"), failures)
          assert.strictEqual(total(byName.deliveries!, "dead"), 0)
          const p50 = byName.latency!.data[1]!.filter((v) => v !== null)
          const p95 = byName.latency!.data[2]!.filter((v) => v !== null)
          assert.isNotEmpty(p50, "a latency was drawn")
          assert.isTrue(p50.every((v) => v >= 0) && p95.every((v, i) => v >= p50[i]!), JSON.stringify(p95))
          assert.strictEqual(byName.events!.data[0]!.length, 60, "one bucket per minute of the hour")
          // The sampler took its first sample when the server started; the webhooks consumer is caught up.
          assert.include(byName.lag!.series, "webhooks lag (events)")
          assert.deepStrictEqual(byName.lag!.data[byName.lag!.series.indexOf("webhooks lag (events)") + 1], [null, 0])
          // Push is not set up here: the figure says so.
          assert.notProperty(byName, "push")
          // biome-ignore lint/performance/useDomNodeTextContent: the visible text is what the test asserts on
          assert.include(yield* Effect.promise(() => page.locator("#chart-push").innerText()), "not set up")
          // biome-ignore lint/performance/useDomNodeTextContent: the visible text is what the test asserts on
          const fact = (name: string) => Effect.promise(() => page.locator(`[data-fact="${name}"]`).innerText())
          assert.strictEqual(yield* fact("events"), String(events))
          assert.strictEqual(yield* fact("delivered"), String(matching))
          assert.strictEqual(yield* fact("failed"), String(failures))
          assert.strictEqual(yield* fact("pending"), "0")
          yield* ConsoleBrowser.screenshot(page, "console-overview.png")
        }).pipe(Effect.scoped),
      120_000,
    )
  },
)
