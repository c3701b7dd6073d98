/**
 * A console page as a route: who is looking (`ConsoleSession`, else the host's `AdminAuth`, else
 * the login form), what they may see (the operator's pages answer a principal with 404, like
 * everything of another's), and the page around what a view renders. A view that cannot find
 * what it was asked for fails with `ConsoleNotFound`; one whose database cannot be read shows why
 * with a 503, never an empty page.
 */
import { Effect, Option, Schema } from "effect"
import type { HttpRouter, HttpServerRequest } from "effect/http"
import { HttpServerResponse } from "effect/http"
import { AdminAuth } from "../admin/AdminAuth.ts"
import { type Html, html } from "../admin/Html.ts"
import * as ConsoleLayout from "./ConsoleLayout.ts"
import * as ConsoleSession from "./ConsoleSession.ts"

export class ConsoleNotFound extends Schema.TaggedError<ConsoleNotFound>()("ConsoleNotFound", {
  what: Schema.String,
}) {
  override get message() {
    return `${this.what} was not found`
  }
}

/** What a view draws: the page's title, the navigation entry it belongs to, its body. */
export interface View {
  readonly title: string
  readonly current: string
  readonly body: Html
}

export type Render<E, R> = (
  viewer: ConsoleLayout.Viewer,
  request: HttpServerRequest.HttpServerRequest,
) => Effect.Effect<View, E, R>

/** The viewer of a request, with the cookie to set when the session is new; `None`: nobody we know. */
export const viewerOf = (request: HttpServerRequest.HttpServerRequest) =>
  Effect.gen(function* () {
    const sessions = yield* ConsoleSession.ConsoleSessions
    const existing = yield* ConsoleSession.read(sessions, request)
    if (Option.isSome(existing)) {
      const viewer = { caller: existing.value.claims.caller, csrf: existing.value.csrf, settings: sessions.settings }
      return Option.some({ viewer, cookie: Option.none<ConsoleSession.Cookie>() })
    }
    const auth = yield* AdminAuth
    const caller = yield* Effect.option(auth.authenticate(request))
    if (Option.isNone(caller)) return Option.none()
    const started = yield* ConsoleSession.start(sessions, request, caller.value)
    const viewer = { caller: caller.value, csrf: started.session.csrf, settings: sessions.settings }
    return Option.some({ viewer, cookie: Option.some(started.cookie) })
  })

export const withCookie = (
  response: HttpServerResponse.HttpServerResponse,
  cookie: Option.Option<ConsoleSession.Cookie>,
) =>
  Option.match(cookie, {
    onNone: () => response,
    onSome: (c) => HttpServerResponse.setCookieUnsafe(response, c.name, c.value, c.options),
  })

const problem = (viewer: ConsoleLayout.Viewer, status: number, title: string, text: string) =>
  ConsoleLayout.respond(viewer, status, ConsoleLayout.page(viewer, title, "", html`<p class="bad">${text}</p>`))

const loginRedirect = (request: HttpServerRequest.HttpServerRequest) =>
  HttpServerResponse.redirect(`/console/login?next=${encodeURIComponent(request.url)}`, { status: 303 })

/** A console route, mounted with the services it needs by `ConsoleRoutes`. */
export interface Route<R> {
  readonly method: "GET" | "POST"
  readonly path: `/console${string}`
  readonly handler: (
    request: HttpServerRequest.HttpServerRequest,
  ) => Effect.Effect<HttpServerResponse.HttpServerResponse, never, R | HttpRouter.RouteContext>
}

export const get = <R>(path: Route<R>["path"], handler: Route<R>["handler"]): Route<R> => ({
  method: "GET",
  path,
  handler,
})
export const post = <R>(path: Route<R>["path"], handler: Route<R>["handler"]): Route<R> => ({
  method: "POST",
  path,
  handler,
})

/** `GET path` drawing `render`; `operatorOnly` pages are a 404 to a principal. */
export const route = <E extends { readonly message: string }, R>(
  path: `/console${string}`,
  render: Render<E, R>,
  options: { readonly operatorOnly?: boolean } = {},
  // A render that reads its route's params needs `RouteContext`: the router provides it, not `mount`.
): Route<Exclude<R, HttpRouter.RouteContext> | ConsoleSession.ConsoleSessions | AdminAuth> => ({
  method: "GET",
  path,
  handler: (request) =>
    Effect.flatMap(viewerOf(request), (found) => {
      if (Option.isNone(found)) return Effect.succeed(loginRedirect(request))
      const { viewer, cookie } = found.value
      const drawn =
        options.operatorOnly === true && !ConsoleLayout.isOperator(viewer)
          ? Effect.succeed(problem(viewer, 404, "Not found", "There is no such page."))
          : render(viewer, request).pipe(
              Effect.map((view) =>
                ConsoleLayout.respond(viewer, 200, ConsoleLayout.page(viewer, view.title, view.current, view.body)),
              ),
              Effect.catch((e: E) =>
                Effect.succeed(
                  e instanceof ConsoleNotFound
                    ? problem(viewer, 404, "Not found", e.message)
                    : problem(viewer, 503, "Cannot be read", `The database cannot be read: ${e.message}`),
                ),
              ),
            )
      return Effect.map(drawn, (response) => withCookie(response, cookie))
    }) as Effect.Effect<
      HttpServerResponse.HttpServerResponse,
      never,
      Exclude<R, HttpRouter.RouteContext> | HttpRouter.RouteContext | ConsoleSession.ConsoleSessions | AdminAuth
    >,
})
