/**
 * How a browser gets into the console and what its cookie may do, over plain HTTP as a browser
 * would send it: the login exchange and the cookie's flags, the API refusing a change from a
 * console session without its CSRF token or from another site's page, and portal links that end.
 * The pages themselves are tested in Chromium by the other files here.
 */
import { assert, layer } from "@effect/vitest"
import { Clock, ConfigProvider, Effect, Option, Redacted } from "effect"
import { TestClock } from "effect/testing"
import { AdminAuth } from "../../src/admin/AdminAuth.ts"
import * as ConsoleSettings from "../../src/console/ConsoleSettings.ts"
import * as TestAdmin from "../support/TestAdmin.ts"
import * as TestWebhooks from "../support/TestWebhooks.ts"

const token = "console-token"
const auth = AdminAuth.token(Option.some(Redacted.make(token)))

/** `POST /console/login` as the browser's form sends it; no redirect followed. */
const login = (base: string, given: string, headers: Record<string, string> = {}) =>
  Effect.promise(() =>
    fetch(`${base}/console/login`, {
      method: "POST",
      redirect: "manual",
      headers: { "content-type": "application/x-www-form-urlencoded", ...headers },
      body: new URLSearchParams({ token: given, next: "/console/subscriptions" }).toString(),
    }),
  )

const cookieOf = (response: Response) => response.headers.getSetCookie().find((c) => c.startsWith("bothy_console="))

const sessionCookie = (base: string) => Effect.map(login(base, token), (response) => cookieOf(response)!.split(";")[0]!)

layer(TestWebhooks.layer(), { excludeTestServices: true })("console sessions", (it) => {
  it.effect(
    "ConsoleCookieFlags: the admin token is exchanged for an HttpOnly, SameSite=Strict cookie on Path=/ (Secure behind https); a wrong token gets no cookie",
    () =>
      Effect.gen(function* () {
        const base = yield* TestAdmin.serve(auth)
        const ok = yield* login(base, token)
        assert.strictEqual(ok.status, 303)
        assert.strictEqual(ok.headers.get("location"), "/console/subscriptions")
        const cookie = cookieOf(ok)!
        assert.match(cookie, /; HttpOnly/i)
        assert.match(cookie, /; SameSite=Strict/i)
        assert.match(cookie, /; Path=\//i)
        assert.notMatch(cookie, /; Secure/i, "plain http on loopback: a Secure cookie would never come back")
        assert.match(cookieOf(yield* login(base, token, { "x-forwarded-proto": "https" }))!, /; Secure/i)

        const wrong = yield* login(base, "not-the-token")
        assert.strictEqual(wrong.status, 401)
        assert.isUndefined(cookieOf(wrong))
        const page = yield* Effect.promise(() => wrong.text())
        assert.include(page, "That is not the admin token.")
        assert.notInclude(page, "not-the-token", "the token given is never echoed")
      }),
  )

  it.effect(
    "ConsoleCookieTampered: a changed or foreign cookie is no session: the console asks to sign in and the API answers 401",
    () =>
      Effect.gen(function* () {
        const base = yield* TestAdmin.serve(auth)
        const cookie = yield* sessionCookie(base)
        const [name, value] = cookie.split("=") as [string, string]
        const [payload, mac] = value.split(".") as [string, string]
        const claims = JSON.parse(Buffer.from(payload, "base64url").toString())
        const forged = Buffer.from(JSON.stringify({ ...claims, e: claims.e + 3600 })).toString("base64url")
        for (const bad of [`${name}=${forged}.${mac}`, `${name}=${payload}.${mac.slice(1)}x`, `${name}=garbage`]) {
          const page = yield* Effect.promise(() =>
            fetch(`${base}/console`, { redirect: "manual", headers: { cookie: bad } }),
          )
          assert.strictEqual(page.status, 303, bad)
          assert.match(page.headers.get("location") ?? "", /^\/console\/login/)
          const api = yield* TestAdmin.call(base, "GET", "/v1/subscriptions", { headers: { cookie: bad } })
          assert.strictEqual(api.status, 401)
        }
        const good = yield* TestAdmin.call(base, "GET", "/v1/subscriptions", { headers: { cookie } })
        assert.strictEqual(good.status, 200, "the untouched cookie is a session")
      }),
  )

  it.effect(
    "ConsoleActionNeedsCsrf (API): a change with the session cookie but without its CSRF token, or with another, is refused and changes nothing; a change from another site's page is refused whatever it carries",
    () =>
      Effect.gen(function* () {
        const base = yield* TestAdmin.serve(auth)
        const subscription = yield* TestWebhooks.subscribe("csrf-owner", "http://127.0.0.1:9/hook", ["csrf-space"])
        const cookie = yield* sessionCookie(base)
        const disable = (headers: Record<string, string>) =>
          TestAdmin.call(base, "POST", `/v1/subscriptions/${subscription.id}/disable`, { headers })
        const state = Effect.map(
          TestAdmin.call(base, "GET", `/v1/subscriptions/${subscription.id}`, { token }),
          (r) => r.body.state,
        )

        const none = yield* disable({ cookie })
        assert.strictEqual(none.status, 401)
        assert.include(JSON.stringify(none.body), "CSRF")
        assert.strictEqual((yield* disable({ cookie, "x-bothy-csrf": "guessed" })).status, 401)
        assert.strictEqual(yield* state, "active")

        // Another site's page: a browser names it in Sec-Fetch-Site or Origin; the bearer token does not help.
        const forged = yield* disable({ authorization: `Bearer ${token}`, "sec-fetch-site": "cross-site" })
        assert.strictEqual(forged.status, 403)
        assert.strictEqual(forged.body._tag, "CrossSiteRequest")
        const fromOrigin = yield* disable({ authorization: `Bearer ${token}`, origin: "http://evil.example" })
        assert.strictEqual(fromOrigin.status, 403)
        assert.strictEqual(yield* state, "active")

        const open = yield* TestAdmin.serve(AdminAuth.token(Option.none()))
        const openForged = yield* TestAdmin.call(open, "POST", `/v1/subscriptions/${subscription.id}/disable`, {
          headers: { origin: "http://evil.example" },
        })
        assert.strictEqual(
          openForged.status,
          403,
          "an API open on loopback is not open to every page the operator visits",
        )
        assert.strictEqual(yield* state, "active")

        const cli = yield* disable({ authorization: `Bearer ${token}` })
        assert.strictEqual(cli.status, 200, "a client that is no browser sends no Origin and is let in")
        assert.strictEqual(yield* state, "disabled")
      }),
  )

  it.effect(
    "PortalLinkExpires: a portal link opens a principal's session until it expires; after that the link and the session it opened are refused",
    () =>
      Effect.gen(function* () {
        const clock = yield* TestClock.make()
        yield* clock.setTime(Date.now())
        const base = yield* TestAdmin.serve(auth).pipe(Effect.provideService(Clock.Clock, clock))
        const link = yield* TestAdmin.call(base, "POST", "/v1/portal-links", {
          token,
          body: { principal: "tenant-a", expiresInSeconds: 300 },
        })
        assert.strictEqual(link.status, 200)
        assert.strictEqual(link.body.url, `${base}${link.body.path}`)
        assert.strictEqual(Date.parse(link.body.expiresAt), Math.floor(Date.now() / 1000) * 1000 + 300_000)
        const open = () => Effect.promise(() => fetch(link.body.url, { redirect: "manual" }))

        const entered = yield* open()
        assert.strictEqual(entered.status, 303)
        assert.strictEqual(
          entered.headers.get("location"),
          "/console/subscriptions",
          "the token leaves the address bar",
        )
        const cookie = cookieOf(entered)!.split(";")[0]!
        const home = () => Effect.promise(() => fetch(`${base}/console`, { redirect: "manual", headers: { cookie } }))
        assert.strictEqual((yield* home()).headers.get("location"), "/console/subscriptions", "a principal's portal")

        yield* clock.adjust("299 seconds")
        assert.strictEqual((yield* open()).status, 303, "still valid a second before it ends")
        yield* clock.adjust("2 seconds")
        const late = yield* open()
        assert.strictEqual(late.status, 403)
        assert.include(yield* Effect.promise(() => late.text()), "expired")
        assert.strictEqual((yield* home()).headers.get("location"), "/console/login", "the session ended with the link")

        const tooLong = yield* TestAdmin.call(base, "POST", "/v1/portal-links", {
          token,
          body: { principal: "tenant-a", expiresInSeconds: 86_401 },
        })
        assert.strictEqual(tooLong.status, 400)
      }),
  )

  it.effect(
    "PortalSessionReadsAsPrincipal: a portal session reads the API as its principal (none of the operator's subscriptions) and changes nothing without its CSRF token",
    () =>
      Effect.gen(function* () {
        const base = yield* TestAdmin.serve(auth)
        const link = yield* TestAdmin.call(base, "POST", "/v1/portal-links", { token, body: { principal: "tenant-b" } })
        const entered = yield* Effect.promise(() => fetch(link.body.url, { redirect: "manual" }))
        const cookie = cookieOf(entered)!.split(";")[0]!
        const again = yield* TestAdmin.call(base, "POST", "/v1/portal-links", {
          headers: { cookie },
          body: { principal: "tenant-c" },
        })
        assert.strictEqual(again.status, 401, "a change from the portal session needs its CSRF token first")
        const own = yield* TestAdmin.call(base, "GET", "/v1/subscriptions", { headers: { cookie } })
        assert.strictEqual(own.status, 200, "the portal session reads the API as its principal")
        assert.deepStrictEqual(own.body.items, [])
      }),
  )

  it.effect("ConsoleSettingsValidated: a bad console setting names itself and the rule", () =>
    Effect.gen(function* () {
      const read = (env: Record<string, string>) =>
        Effect.flip(ConsoleSettings.load).pipe(Effect.provide(ConfigProvider.layer(ConfigProvider.fromEnv({ env }))))
      const accent = yield* read({ BOTHY_CONSOLE_ACCENT: "red" })
      assert.include(accent.message, "BOTHY_CONSOLE_ACCENT (console.accent)")
      assert.include(accent.message, "#rrggbb")
      const frames = yield* read({ BOTHY_CONSOLE_FRAME_ANCESTORS: "https://a.example; script-src *" })
      assert.include(frames.message, "console.frame_ancestors")
      const logo = yield* read({ BOTHY_CONSOLE_LOGO_URL: "javascript:alert(1)" })
      assert.include(logo.message, "console.logo_url")
      const ok = yield* ConsoleSettings.load.pipe(
        Effect.provide(
          ConfigProvider.layer(
            ConfigProvider.fromEnv({
              env: { BOTHY_CONSOLE_TITLE: "Acme hooks", BOTHY_CONSOLE_FRAME_ANCESTORS: "https://app.acme.example" },
            }),
          ),
        ),
      )
      assert.strictEqual(ok.title, "Acme hooks")
      assert.strictEqual(ok.frameAncestors, "https://app.acme.example")
    }),
  )
})
