/**
 * Getting into the console: the login form that exchanges the admin bearer token for a session,
 * the portal link that opens a principal's session, and logging out. Each change is refused from
 * another site's page (`refuseCrossSite`), so no page elsewhere can log a browser in as someone.
 */
import { Effect, Option } from "effect"
import { Headers, type HttpServerRequest, HttpServerResponse } from "effect/http"
import { AdminAuth, refuseCrossSite } from "../admin/AdminAuth.ts"
import { html } from "../admin/Html.ts"
import { securityHeaders } from "./ConsoleLayout.ts"
import { get, post, type Route, withCookie } from "./ConsolePage.ts"
import * as ConsoleSession from "./ConsoleSession.ts"
import * as ConsoleToken from "./ConsoleToken.ts"

// Only a path on this server: `next` must not send a fresh session to another site.
const safeNext = (next: string | null) => (next !== null && /^\/console(\/[^/\\]|$|\?)/.test(next) ? next : "/console")

const form = (title: string, next: string, error: string | undefined) => html`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Sign in · ${title}</title><link rel="icon" href="data:,"><link rel="stylesheet" href="/console/assets/console.css">
<link rel="stylesheet" href="/console/assets/brand.css"></head>
<body><main id="main" class="login"><h1>${title}</h1>
${error === undefined ? "" : html`<p class="bad" role="alert">${error}</p>`}
<form method="post" action="/console/login"><input type="hidden" name="next" value="${next}">
<label for="token">Admin token</label><input id="token" name="token" type="password" autocomplete="current-password" required autofocus>
<button type="submit">Sign in</button></form></main></body></html>`

const formResponse = (sessions: ConsoleSession.ConsoleSessionsShape, status: number, next: string, error?: string) =>
  HttpServerResponse.text(form(sessions.settings.title, next, error).markup, {
    status,
    contentType: "text/html; charset=utf-8",
    headers: securityHeaders(sessions.settings),
  })

const searchParam = (request: HttpServerRequest.HttpServerRequest, name: string) =>
  new URL(request.url, "http://console").searchParams.get(name)

const showForm: Route<ConsoleSession.ConsoleSessions> = get("/console/login", (request) =>
  Effect.map(Effect.service(ConsoleSession.ConsoleSessions), (sessions) =>
    formResponse(sessions, 200, safeNext(searchParam(request, "next"))),
  ),
)

const signIn: Route<ConsoleSession.ConsoleSessions | AdminAuth> = post("/console/login", (request) =>
  Effect.gen(function* () {
    const sessions = yield* ConsoleSession.ConsoleSessions
    const crossSite = yield* Effect.result(refuseCrossSite(request))
    if (crossSite._tag === "Failure") return formResponse(sessions, 403, "/console", crossSite.failure.message)
    const body = new URLSearchParams(yield* Effect.orElseSucceed(request.text, () => ""))
    const next = safeNext(body.get("next"))
    const token = body.get("token") ?? ""
    const asBearer = request.modify({ headers: Headers.set(request.headers, "authorization", `Bearer ${token}`) })
    const caller = yield* Effect.option((yield* AdminAuth).authenticate(asBearer))
    if (Option.isNone(caller)) return formResponse(sessions, 401, next, "That is not the admin token.")
    const started = yield* ConsoleSession.start(sessions, request, caller.value)
    return withCookie(HttpServerResponse.redirect(next, { status: 303 }), Option.some(started.cookie))
  }),
)

const signOut: Route<never> = post("/console/logout", (request) =>
  Effect.gen(function* () {
    const crossSite = yield* Effect.result(refuseCrossSite(request))
    if (crossSite._tag === "Failure") return HttpServerResponse.text(crossSite.failure.message, { status: 403 })
    return HttpServerResponse.expireCookieUnsafe(
      HttpServerResponse.redirect("/console/login", { status: 303 }),
      ConsoleSession.cookieName,
      {
        path: "/",
      },
    )
  }),
)

/**
 * `GET /console/portal/enter?token=…`: a portal link (`PortalLinks`) opens a session for its
 * principal that ends when the link does, then leaves the token out of the address bar.
 */
const enterPortal: Route<ConsoleSession.ConsoleSessions> = get("/console/portal/enter", (request) =>
  Effect.gen(function* () {
    const sessions = yield* ConsoleSession.ConsoleSessions
    const now = Math.floor((yield* Effect.clockWith((c) => c.currentTimeMillis)) / 1000)
    const claims = ConsoleToken.verify(sessions.key, "portal-link", searchParam(request, "token") ?? "", now)
    if (Option.isNone(claims) || claims.value.caller._tag !== "Principal") {
      return HttpServerResponse.text("This portal link is not valid or has expired: ask for a new one.", {
        status: 403,
        headers: securityHeaders(sessions.settings),
      })
    }
    const started = yield* ConsoleSession.start(sessions, request, claims.value.caller, claims.value.expiresAt - now)
    return withCookie(
      HttpServerResponse.redirect("/console/subscriptions", { status: 303 }),
      Option.some(started.cookie),
    )
  }),
)

export const routes = [showForm, signIn, signOut, enterPortal] as const
