/**
 * The push page: registrations of every kind, registered through the admin API as a host's back
 * end would, counted by kind and listed with where they point, never with a whole endpoint or
 * token (they address the device). With push set up, the overview draws its push chart.
 */
import { assert, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { PushConfig } from "../../src/push/PushConfig.ts"
import * as TestAdmin from "../support/TestAdmin.ts"
import * as TestPush from "../support/TestPush.ts"
import * as TestWebhooks from "../support/TestWebhooks.ts"
import * as ConsoleBrowser from "./ConsoleBrowser.ts"

const Live = TestWebhooks.layer().pipe(Layer.provideMerge(PushConfig.layerWith(TestPush.settings())))

layer(Live, { excludeTestServices: true })("the console's push page", (it) => {
  it.effect(
    "ConsolePushListsEveryKind: web push, APNs and FCM registrations are counted by kind and listed without their whole endpoint or token",
    () =>
      Effect.gen(function* () {
        const base = yield* ConsoleBrowser.serve
        const api = TestAdmin.client(base, { token: ConsoleBrowser.token })
        const browsers = [TestPush.unheardSubscription(), TestPush.unheardSubscription()]
        for (const subscription of browsers) {
          assert.strictEqual((yield* api.post("/v1/registrations", { principal: "alice", subscription })).status, 201)
        }
        const apnsToken = `${"0f".repeat(31)}abcdef`
        const apns = { token: apnsToken, topic: "com.example.app", environment: "sandbox" }
        assert.strictEqual((yield* api.post("/v1/registrations", { principal: "bob", apns })).status, 201)
        const fcmToken = `${"f".repeat(34)}123456`
        assert.strictEqual(
          (yield* api.post("/v1/registrations", { principal: "bob", fcm: { token: fcmToken } })).status,
          201,
        )

        const { page } = yield* ConsoleBrowser.open
        yield* ConsoleBrowser.signIn(page, base, "/console/push")
        // biome-ignore lint/performance/useDomNodeTextContent: the visible text is what the test asserts on
        const text = (selector: string) => Effect.promise(() => page.locator(selector).innerText())
        for (const [kind, n] of [
          ["webpush", 2],
          ["apns", 1],
          ["fcm", 1],
        ] as const) {
          assert.strictEqual(yield* text(`#push-kinds tr[data-kind="${kind}"] [data-cell="registrations"]`), String(n))
          assert.strictEqual(yield* text(`#push-kinds tr[data-kind="${kind}"] [data-cell="sent"]`), "0")
        }
        const recent = yield* text("#push-recent")
        assert.include(recent, "token …abcdef for com.example.app (sandbox)")
        assert.include(recent, "token …123456")
        assert.include(recent, new URL(browsers[0]!.endpoint).origin)
        const html = yield* Effect.promise(() => page.content())
        for (const whole of [apnsToken, fcmToken, browsers[0]!.endpoint]) assert.notInclude(html, whole)

        yield* ConsoleBrowser.screenshot(page, "console-push.png")
        yield* Effect.promise(() => page.goto(`${base}/console/overview`))
        const charts = yield* ConsoleBrowser.drawnCharts(page)
        assert.deepStrictEqual(charts.push?.series, ["completed", "discarded", "cancelled"])
      }).pipe(Effect.scoped),
    120_000,
  )
})
