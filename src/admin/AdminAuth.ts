/**
 * Who is calling the admin API: the contract a host app replaces (`AdminAuth`: a request in, a
 * `Caller` out), the default that `bothy worker` uses (an operator bearer token,
 * `BOTHY_ADMIN_TOKEN`), and the HttpApi middleware that runs it before every endpoint.
 *
 * What it keeps true: an operator sees and changes everything; a principal (what a host's
 * `AdminAuth` maps its users to) only its own subscriptions and registrations, checked by the
 * handlers (`AdminAccess`). The token is `Redacted` and compared in constant time (as SHA-256
 * digests, so its length leaks nothing either). Without a token the default lets every request
 * in as an operator, which `AdminServer` allows on a loopback address only.
 */
import { createHash, timingSafeEqual } from "node:crypto"
import { Context, Effect, Layer, Option, Redacted, Schema } from "effect"
import { HttpServerRequest } from "effect/http"
import { HttpApiMiddleware, HttpApiSecurity } from "effect/http-api"
import * as BothyConfig from "../platform/BothyConfig.ts"

export type Caller = { readonly _tag: "Operator" } | { readonly _tag: "Principal"; readonly principal: string }

export const operator: Caller = { _tag: "Operator" }
export const principal = (principal: string): Caller => ({ _tag: "Principal", principal })

/** The caller of the request being handled (the middleware provides it). */
export class CurrentCaller extends Context.Service<CurrentCaller, Caller>()("bothy/admin/CurrentCaller") {}

export class Unauthenticated extends Schema.TaggedError<Unauthenticated>()(
  "Unauthenticated",
  { detail: Schema.String },
  { httpApiStatus: 401 },
) {
  override get message() {
    return `not authenticated: ${this.detail}`
  }
}

export interface AdminAuthShape {
  readonly authenticate: (request: HttpServerRequest.HttpServerRequest) => Effect.Effect<Caller, Unauthenticated>
  /** Every request gets in (no token configured): `AdminServer` serves it on loopback only. */
  readonly open?: boolean
}

export class AdminAuth extends Context.Service<AdminAuth, AdminAuthShape>()("bothy/AdminAuth") {
  /** A host's own mapping of requests to callers; never `open`. */
  static readonly make = (authenticate: AdminAuthShape["authenticate"]): AdminAuthShape =>
    AdminAuth.of({ authenticate })

  /** The operator token: a request whose bearer token equals it is the operator; none given: open. */
  static readonly token = (token: Option.Option<Redacted.Redacted<string>>): AdminAuthShape =>
    Option.match(token, {
      onNone: () => AdminAuth.of({ authenticate: () => Effect.succeed(operator), open: true }),
      onSome: (expected) => {
        const digest = (text: string) => createHash("sha256").update(text).digest()
        const want = digest(Redacted.value(expected))
        return AdminAuth.of({
          authenticate: (request) => {
            const header = request.headers.authorization ?? ""
            const match = /^Bearer\s+(.+)$/i.exec(header)
            if (match === null) return Effect.fail(new Unauthenticated({ detail: "a bearer token is required" }))
            return timingSafeEqual(digest(match[1]!.trim()), want)
              ? Effect.succeed(operator)
              : Effect.fail(new Unauthenticated({ detail: "the bearer token is not the admin token" }))
          },
        })
      },
    })

  /** `token` from `BOTHY_ADMIN_TOKEN` (`admin.token`). */
  static readonly layerConfig = Layer.effect(
    AdminAuth,
    Effect.suspend(() => loadToken).pipe(Effect.map(AdminAuth.token)),
  )
}

/** `BOTHY_ADMIN_TOKEN` (`admin.token`): the operator's bearer token; unset, the API is open on loopback. */
export const loadToken = BothyConfig.variable(BothyConfig.envName("admin.token"), {
  key: "admin.token",
  unset: "for an API open on loopback only",
})

/** A change asked from another site's page (a forged form, a cross-site fetch): refused whatever it carries. */
export class CrossSiteRequest extends Schema.TaggedError<CrossSiteRequest>()(
  "CrossSiteRequest",
  { detail: Schema.String },
  { httpApiStatus: 403 },
) {
  override get message() {
    return `refused: ${this.detail}`
  }
}

const safeMethods = new Set(["GET", "HEAD", "OPTIONS"])

/**
 * Refuses a change that a browser says comes from another site (`Sec-Fetch-Site`, or an `Origin`
 * naming another host). A client that is no browser (the CLI, a host's back end) sends neither and
 * passes. This is what keeps an API open on loopback from being driven by any page the operator visits.
 */
export const refuseCrossSite = (
  request: HttpServerRequest.HttpServerRequest,
): Effect.Effect<void, CrossSiteRequest> => {
  if (safeMethods.has(request.method)) return Effect.void
  const site = request.headers["sec-fetch-site"]
  if (site !== undefined && site !== "same-origin" && site !== "none") {
    return Effect.fail(new CrossSiteRequest({ detail: `a ${request.method} from a ${site} page` }))
  }
  const origin = request.headers.origin
  if (origin !== undefined && origin !== "null") {
    const host = URL.canParse(origin) ? new URL(origin).host : ""
    if (host !== request.headers.host) {
      return Effect.fail(new CrossSiteRequest({ detail: `a ${request.method} from the page of ${origin}` }))
    }
  } else if (origin === "null") {
    return Effect.fail(new CrossSiteRequest({ detail: `a ${request.method} from an opaque origin` }))
  }
  return Effect.void
}

/**
 * A browser session that stands for a caller (the console's cookie): `None` when the request has
 * none, and a failure when it has one but a change lacks the session's CSRF token. Optional: without
 * it the API knows only `AdminAuth`.
 */
export class BrowserSessions extends Context.Service<
  BrowserSessions,
  {
    readonly authenticate: (
      request: HttpServerRequest.HttpServerRequest,
    ) => Effect.Effect<Option.Option<Caller>, Unauthenticated>
  }
>()("bothy/admin/BrowserSessions") {}

/** Runs `AdminAuth` before every endpoint and provides `CurrentCaller`; documented as bearer auth. */
export class AdminAuthorization extends HttpApiMiddleware.Service<AdminAuthorization, { provides: CurrentCaller }>()(
  "bothy/admin/AdminAuthorization",
  { security: { bearer: HttpApiSecurity.bearer }, error: [Unauthenticated, CrossSiteRequest] },
) {}

export const authorizationLayer = Layer.effect(
  AdminAuthorization,
  Effect.gen(function* () {
    const auth = yield* AdminAuth
    const sessions = yield* Effect.serviceOption(BrowserSessions)
    const callerOf = (request: HttpServerRequest.HttpServerRequest) =>
      Option.match(sessions, {
        onNone: () => auth.authenticate(request),
        onSome: (s) =>
          Effect.flatMap(
            s.authenticate(request),
            Option.match({ onNone: () => auth.authenticate(request), onSome: Effect.succeed }),
          ),
      })
    return AdminAuthorization.of({
      // The host's mapping reads the request itself (a cookie, a header of its own), not only the bearer.
      bearer: (handler) =>
        Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) =>
          refuseCrossSite(request).pipe(
            Effect.andThen(callerOf(request)),
            Effect.flatMap((caller) => Effect.provideService(handler, CurrentCaller, caller)),
          ),
        ),
    })
  }),
)
