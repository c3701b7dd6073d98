/**
 * A forged form post in a real browser: Chromium signs in to the console, then visits a page on
 * another origin (another loopback port) whose form posts to the admin API as soon as it loads.
 * The browser sends no session cookie with it (SameSite=Strict) and names the other site
 * (`Sec-Fetch-Site`); the API refuses it either way and the subscription stays as it was.
 */
import { assert, layer } from "@effect/vitest"
import { Deferred, Effect, Option, Redacted } from "effect"
import { AdminAuth } from "../../src/admin/AdminAuth.ts"
import * as LoopbackServer from "../support/LoopbackServer.ts"
import * as TestAdmin from "../support/TestAdmin.ts"
import * as TestWebhooks from "../support/TestWebhooks.ts"
import * as ConsoleBrowser from "./ConsoleBrowser.ts"

layer(TestWebhooks.layer(), { excludeTestServices: true })("a forged form post", (it) => {
  for (const auth of ["token", "open"] as const) {
    it.effect(
      `ConsoleActionNeedsCsrf: a signed-in browser tricked by another site's auto-submitting form changes nothing (API ${auth === "token" ? "with a token" : "open on loopback"})`,
      () =>
        Effect.gen(function* () {
          const base = yield* TestAdmin.serve(
            AdminAuth.token(auth === "token" ? Option.some(Redacted.make(ConsoleBrowser.token)) : Option.none()),
          )
          const subscription = yield* TestWebhooks.subscribe("forged-owner", "http://127.0.0.1:9/hook", [
            "forged-space",
          ])
          const { browser, page } = yield* ConsoleBrowser.open
          yield* ConsoleBrowser.signIn(page, base, "/console/overview")
          const cookies = yield* Effect.promise(() => browser.cookies(base))
          assert.isTrue(
            cookies.some((c) => c.name === "bothy_console"),
            "the browser holds a session",
          )

          const answered = yield* Deferred.make<number>()
          const evil = yield* LoopbackServer.http((_request, response) =>
            response
              .writeHead(200, { "content-type": "text/html" })
              .end(
                `<form id="f" method="post" action="${base}/v1/subscriptions/${subscription.id}/disable"></form><script>document.getElementById("f").submit()</script>`,
              ),
          )
          page.on("response", (response) => {
            if (response.url().endsWith("/disable")) Deferred.doneUnsafe(answered, Effect.succeed(response.status()))
          })
          yield* Effect.promise(() => page.goto(`${evil.origin}/`))
          assert.strictEqual(yield* Deferred.await(answered), 403, "refused as a cross-site change")
          const now = yield* TestAdmin.call(base, "GET", `/v1/subscriptions/${subscription.id}`, {
            token: ConsoleBrowser.token,
          })
          assert.strictEqual(now.body.state, "active")
        }),
    )
  }
})
