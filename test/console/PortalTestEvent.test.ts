/**
 * The portal's "send a test event": a tenant opens its portal link in Chromium, confirms the
 * button on its subscription's page, and its endpoint receives a `bothy.subscription.test` event,
 * signed, under the subscription's next sequence, naming the tenant who asked. The same call on
 * another tenant's subscription is a 404.
 */
import { assert, layer } from "@effect/vitest"
import { Effect, Option, Queue, Redacted } from "effect"
import { Webhook } from "standardwebhooks"
import { AdminAuth } from "../../src/admin/AdminAuth.ts"
import { testEventType } from "../../src/log/TestEvent.ts"
import * as WebhookReceiver from "../../testkit/WebhookReceiver.ts"
import * as Chromium from "../support/Chromium.ts"
import * as TestAdmin from "../support/TestAdmin.ts"
import * as TestWebhooks from "../support/TestWebhooks.ts"

const token = "portal-test-token"

layer(TestWebhooks.layer(), { excludeTestServices: true })("the portal's test event", (it) => {
  it.effect(
    "PortalSendsTestEvent: the button, confirmed, sends the tenant's endpoint one signed bothy.subscription.test event under its next sequence; another tenant's subscription is a 404 to the same call",
    () =>
      Effect.gen(function* () {
        const base = yield* TestAdmin.serve(AdminAuth.token(Option.some(Redacted.make(token))))
        const receiver = yield* WebhookReceiver.start(() => ({ status: 200 }))
        const mine = yield* TestWebhooks.subscribe("tenant-t", receiver.url("/mine"), ["space-t"])
        const theirs = yield* TestWebhooks.subscribe("tenant-u", receiver.url("/theirs"), ["space-t"])
        const signals = yield* TestWebhooks.signals
        yield* TestWebhooks.startDrainers(signals)
        yield* TestWebhooks.append("space-t", { i: 1 })
        yield* TestWebhooks.round()
        const first = yield* Queue.take(receiver.received)
        yield* Queue.take(receiver.received)

        const link = yield* TestAdmin.call(base, "POST", "/v1/portal-links", { token, body: { principal: "tenant-t" } })
        const browser = yield* Chromium.launch
        const page = yield* Effect.promise(() => browser.newPage())
        const dialogs: Array<string> = []
        page.on("dialog", (dialog) => {
          dialogs.push(dialog.message())
          void dialog.accept()
        })
        yield* Effect.promise(async () => {
          await page.goto(link.body.url)
          await page.goto(`${base}/console/subscriptions/${mine.id}`)
          await Promise.all([page.waitForEvent("load"), page.click("#test-event button")])
        })
        assert.include(dialogs.at(-1) ?? "", "Send a test event")
        assert.strictEqual(yield* Effect.promise(() => page.locator(".flash").textContent()), "Test event sent: done")

        yield* TestWebhooks.round()
        const request = yield* Queue.take(receiver.received)
        assert.strictEqual(request.path, "/mine")
        const verified = new Webhook(Redacted.value(mine.secret)).verify(
          request.body,
          request.headers as Record<string, string>,
        ) as { type: string; sequence: number; data: Record<string, unknown> }
        assert.strictEqual(verified.type, testEventType)
        assert.strictEqual(verified.sequence, TestWebhooks.envelope(first).sequence + 1, "its next sequence")
        assert.deepStrictEqual(verified.data, { subscription: mine.id, owner: "tenant-t", requestedBy: "tenant-t" })

        const csrf = yield* Effect.promise(() => page.locator('meta[name="bothy-csrf"]').getAttribute("content"))
        const status = yield* Effect.promise(() =>
          page.evaluate(
            async (call) => (await fetch(call.path, { method: "POST", headers: { "x-bothy-csrf": call.csrf } })).status,
            { path: `/v1/subscriptions/${theirs.id}/test-event`, csrf: csrf ?? "" },
          ),
        )
        assert.strictEqual(status, 404, "another tenant's subscription")
        yield* TestWebhooks.round()
        assert.strictEqual(receiver.log.filter((r) => r.path === "/theirs").length, 1, "theirs got only the first")
      }).pipe(Effect.scoped),
    60_000,
  )
})
