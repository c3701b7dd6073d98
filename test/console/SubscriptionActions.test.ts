/**
 * The subscription page's actions in Chromium, against a receiver that counts what reaches it:
 * a delivery's resend button (its confirmation accepted) makes the receiver get it once more with
 * the same webhook-id; recover since a time sends again exactly the failed deliveries created
 * since then, and not an older one. The drain and recovery jobs run as the worker runs them.
 */
import { assert, layer } from "@effect/vitest"
import { Duration, Effect } from "effect"
import { SqlClient } from "effect/sql"
import * as DeliveryResend from "../../src/webhooks/subscriptions/DeliveryResend.ts"
import { WebhookSubscriptions } from "../../src/webhooks/subscriptions/WebhookSubscriptions.ts"
import * as LoopbackServer from "../support/LoopbackServer.ts"
import * as TestWebhooks from "../support/TestWebhooks.ts"
import * as ConsoleBrowser from "./ConsoleBrowser.ts"

// A failed request waits an hour for its retry: only a recovery sends it sooner.
const Live = TestWebhooks.layer({ retrySteps: [Duration.hours(1)] })

layer(Live, { excludeTestServices: true })("the subscription page's actions", (it) => {
  it.effect(
    "ConsoleActionResendsAndRecovers: resend sends a delivery once more under its webhook-id; recover since a time sends again the failed deliveries created since then, and only those",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const webhooks = yield* WebhookSubscriptions
        let status = 200
        const receiver = yield* LoopbackServer.http((_, response) => response.writeHead(status).end())
        const count = () => receiver.received().length
        const sub = yield* TestWebhooks.subscribe("act-owner", `${receiver.origin}/hook`, ["act-space"])
        const signals = yield* TestWebhooks.signals
        yield* TestWebhooks.startDrainers(signals, { kinds: [yield* DeliveryResend.make] })
        const received = (n: number) => signals.until(Effect.sync(() => count() === n))
        const off = Effect.gen(function* () {
          yield* webhooks.disable(sub.id)
          yield* webhooks.enable(sub.id)
          yield* TestWebhooks.round()
        })

        // One delivered.
        yield* TestWebhooks.append("act-space", { i: 1 })
        yield* TestWebhooks.round()
        yield* received(1)
        yield* signals.until(Effect.map(TestWebhooks.deliveries(sub.id), (ds) => ds[0]?.state === "delivered"))

        const { base, page, dialogs } = yield* ConsoleBrowser.operator()
        const path = `/console/subscriptions/${sub.id}`
        assert.strictEqual(yield* ConsoleBrowser.visit(page, base, path), 200)
        const [first] = yield* Effect.promise(() =>
          page.locator("#deliveries tbody tr").evaluateAll((rows) => rows.map((r) => r.getAttribute("data-delivery"))),
        )
        yield* Effect.promise(() =>
          Promise.all([page.waitForEvent("load"), page.click(`tr[data-delivery="${first}"] button`)]),
        )
        yield* received(2)
        assert.deepStrictEqual(dialogs.at(-1), { type: "confirm", message: `Send delivery ${first} again?` })
        const [original, again] = receiver.received()
        assert.strictEqual(again!.headers["webhook-id"], original!.headers["webhook-id"])
        assert.strictEqual(TestWebhooks.envelope(again!).data.i, 1)
        assert.strictEqual(yield* Effect.promise(() => page.locator(".flash").textContent()), "Resend: done")

        // The delivery's page rebuilds the headers the receiver got; the signature shows redacted.
        assert.strictEqual(yield* ConsoleBrowser.visit(page, base, `/console/deliveries/${first}`), 200)
        const sent = yield* Effect.promise(() =>
          page
            .locator("#attempt-2 table.headers tbody tr")
            .evaluateAll((rows) => rows.map((r) => [...r.querySelectorAll("td")].map((td) => td.textContent ?? ""))),
        )
        const header = (name: string) => sent.find(([n]) => n === name)?.[1]
        assert.strictEqual(header("webhook-id"), again!.headers["webhook-id"])
        assert.strictEqual(header("webhook-timestamp"), again!.headers["webhook-timestamp"])
        assert.strictEqual(header("content-type"), again!.headers["content-type"])
        assert.strictEqual(header("webhook-signature"), "v1,(redacted)")
        assert.isUndefined(again!.headers["user-agent"], "bothy sends no user-agent, as the page says")
        assert.strictEqual(header("user-agent"), "(none sent)")

        // Failed and dead: one created two hours ago (before the recovery's time), then two recent ones.
        status = 500
        yield* TestWebhooks.append("act-space", { i: 2 })
        yield* TestWebhooks.round()
        yield* received(3)
        yield* off
        yield* sql`UPDATE webhook_deliveries SET created_at = created_at - interval '2 hours'
                   WHERE subscription_id = ${sub.id}::uuid AND state = 'dead'`
        yield* TestWebhooks.append("act-space", { i: 3 })
        yield* TestWebhooks.append("act-space", { i: 4 })
        yield* TestWebhooks.round()
        yield* received(4)
        yield* off
        const states = Effect.map(TestWebhooks.deliveries(sub.id), (ds) => ds.map((d) => `${d.i}:${d.state}`))
        assert.deepStrictEqual(yield* states, ["1:delivered", "2:dead", "3:dead", "4:dead"])

        // Recover since an hour ago, through the page's form: 3 and 4 come again, 2 stays dead.
        status = 200
        assert.strictEqual(yield* ConsoleBrowser.visit(page, base, path), 200)
        const hourAgo = new Date(Date.now() - 3_600_000).toISOString().slice(0, 16)
        yield* Effect.promise(async () => {
          await page.fill("#recover input[name=since]", hourAgo)
          await Promise.all([page.waitForEvent("load"), page.click("#recover button")])
        })
        assert.strictEqual(
          dialogs.at(-1)?.message,
          "Send again every failed delivery of this subscription since that time?",
        )
        yield* received(6)
        yield* signals.until(
          Effect.map(states, (s) => s.join() === ["1:delivered", "2:dead", "3:delivered", "4:delivered"].join()),
        )
        assert.deepStrictEqual(
          receiver
            .received()
            .slice(4)
            .map((r) => TestWebhooks.envelope(r).data.i),
          [3, 4],
        )
        assert.strictEqual(yield* Effect.promise(() => page.locator(".flash").textContent()), "Recover: done")
        assert.strictEqual(count(), 6, "nothing else came")
      }),
    120_000,
  )
})
