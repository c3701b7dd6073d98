/**
 * Everything a tenant or receiver controls reaches the subscription pages as text: a script and
 * an `<img onerror>` in an event's type (which an append refuses, so the test writes it as an
 * older row could hold it), in its payload, in the subscription's URL (its query string, written
 * unnormalized since validation percent-encodes the markup) and an
 * extra header, in the receiver's response body and a response header (bothy keeps no response
 * header, so that one must simply not surface anywhere). On the subscriptions
 * list, the subscription's page and the delivery's page no dialog opens, `window.__pwned` stays
 * unset, no such element exists in the page, and the text is there to read.
 */
import { assert, layer } from "@effect/vitest"
import { Duration, Effect } from "effect"
import { SqlClient } from "effect/sql"
import { WebhookSubscriptions } from "../../src/webhooks/subscriptions/WebhookSubscriptions.ts"
import * as LoopbackServer from "../support/LoopbackServer.ts"
import * as TestWebhooks from "../support/TestWebhooks.ts"
import * as ConsoleBrowser from "./ConsoleBrowser.ts"

const Live = TestWebhooks.layer({ retrySteps: [Duration.hours(1)] })

const script = "<script>window.__pwned=1;alert(1)</script>"
const img = "<img src=x onerror=window.__pwned=2;alert(2)>"
const evil = `${script}${img}`

layer(Live, { excludeTestServices: true })("escaping on the subscription pages", (it) => {
  it.effect(
    "ConsoleEscapesEverything: a script in an event type, a payload, a URL, an extra header, a response body and a response header runs nowhere and shows as text",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const receiver = yield* LoopbackServer.http((_, response) =>
          response.writeHead(500, { "content-type": "text/html", "x-evil": evil }).end(`${evil}${"y".repeat(3000)}`),
        )
        // Validation stores the URL normalized (markup percent-encoded); the raw one is written below.
        const sub = yield* TestWebhooks.subscribe("esc-owner", `${receiver.origin}/hook?q=${evil}`, ["esc-space"])
        const { url: stored } = yield* (yield* WebhookSubscriptions).update(sub.id, { headers: { "x-note": evil } })
        assert.include(stored, "%3Cscript%3E")

        const refused = yield* Effect.result(TestWebhooks.append("esc-space", { note: evil }, evil))
        assert.strictEqual(refused._tag, "Failure", "an append refuses such a type")
        const appended = yield* TestWebhooks.append("esc-space", { note: evil }, "item.created")
        yield* sql`UPDATE event_log SET type = ${evil} WHERE seq = ${appended.firstSeq}`
        const signals = yield* TestWebhooks.signals
        yield* Effect.scoped(
          Effect.gen(function* () {
            yield* TestWebhooks.startDrainers(signals)
            yield* TestWebhooks.round()
            yield* signals.until(Effect.map(TestWebhooks.deliveries(sub.id), (ds) => ds[0]?.attempts === 1))
          }),
        )
        const [delivery] = yield* sql<{ id: string }>`
          SELECT id::text AS id FROM webhook_deliveries WHERE subscription_id = ${sub.id}::uuid`

        // The pages must not lean on that normalization: the URL as a row could hold it unnormalized.
        const url = `${receiver.origin}/hook?q=${evil}&r='"x"'`
        yield* sql`UPDATE webhook_subscriptions SET url = ${url} WHERE id = ${sub.id}::uuid`

        const { base, page, dialogs } = yield* ConsoleBrowser.operator()
        const visits: ReadonlyArray<readonly [string, ReadonlyArray<string>]> = [
          ["/console/subscriptions", [url]],
          [`/console/subscriptions/${sub.id}`, [url, evil]],
          [`/console/deliveries/${delivery!.id}`, [url, evil, `"note": "${evil}"`, `x-note\t${evil}`]],
        ]
        for (const [path, texts] of visits) {
          assert.strictEqual(yield* ConsoleBrowser.visit(page, base, path), 200, path)
          // biome-ignore lint/performance/useDomNodeTextContent: the visible text is what the test asserts on
          const shown = yield* Effect.promise(() => page.locator("main").innerText())
          for (const text of texts) assert.include(shown, text, `${path} shows it as text`)
          // A string, evaluated in the page (the tests' TypeScript knows no DOM globals).
          const injected = yield* Effect.promise(() =>
            page.evaluate(`({
              pwned: window.__pwned,
              scripts: document.querySelectorAll("main script").length,
              images: document.querySelectorAll("img[onerror], main img").length,
            })`),
          )
          assert.deepStrictEqual(injected, { pwned: undefined, scripts: 0, images: 0 }, path)
        }
        assert.deepStrictEqual(dialogs, [], "no alert ever opened")

        // The delivery's page (the last visited) shows the first KiB of the answer, as text.
        const body = yield* Effect.promise(() => page.locator("#attempt-1 pre.response").textContent())
        assert.strictEqual(Buffer.byteLength(body ?? ""), 1024)
        assert.isTrue(body?.startsWith(evil))
        assert.include(yield* Effect.promise(() => page.locator("#attempt-1 h4").textContent()), "(first KiB)")
      }),
    120_000,
  )
})
