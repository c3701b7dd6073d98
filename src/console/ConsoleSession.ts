/**
 * Who is looking at the console, and the cookie that remembers it.
 *
 * A browser cannot send the admin bearer token on a link, so the console exchanges it once for a
 * session cookie (`HttpOnly`, `SameSite=Strict`, `Path=/`, `Secure` behind https): the login form
 * takes the token, or a host's own `AdminAuth` admits the request as it is (its cookie, its header)
 * and the console sets the session on the first page. The cookie also authenticates the admin API
 * (`AdminAuth.authorizationLayer`), which the pages' actions call; a change made with it needs the
 * session's CSRF token in `x-bothy-csrf`, and a request from another site is refused whatever it
 * carries (`CrossSite`).
 */
import { Clock, Context, Duration, Effect, Layer, Option, type Redacted } from "effect"
import type { Cookies, HttpServerRequest } from "effect/http"
import { BrowserSessions, type Caller, Unauthenticated } from "../admin/AdminAuth.ts"
import { WebhookConfig } from "../webhooks/WebhookConfig.ts"
import * as ConsoleSettings from "./ConsoleSettings.ts"
import * as ConsoleToken from "./ConsoleToken.ts"

export const cookieName = "bothy_console"
export const csrfHeader = "x-bothy-csrf"

export interface Cookie {
  readonly name: string
  readonly value: string
  readonly options: Cookies.Cookie["options"]
}

export interface Session {
  readonly claims: ConsoleToken.Claims
  readonly csrf: string
}

export interface ConsoleSessionsShape {
  readonly key: Redacted.Redacted<Uint8Array>
  readonly settings: ConsoleSettings.ConsoleSettings
}

export class ConsoleSessions extends Context.Service<ConsoleSessions, ConsoleSessionsShape>()(
  "bothy/console/ConsoleSessions",
) {
  static readonly make = (
    secretKey: Parameters<typeof ConsoleToken.deriveKey>[0],
    settings: ConsoleSettings.ConsoleSettings = ConsoleSettings.defaults,
  ): ConsoleSessionsShape => ({ key: ConsoleToken.deriveKey(secretKey), settings })

  /** The key from `WebhookConfig`, the settings from the environment. */
  static readonly load = Effect.gen(function* () {
    const config = yield* WebhookConfig
    return ConsoleSessions.make(config.secretKey, yield* ConsoleSettings.load)
  })

  static readonly layer = Layer.effect(ConsoleSessions, ConsoleSessions.load)
}

const nowSeconds = Effect.map(Clock.currentTimeMillis, (ms) => Math.floor(ms / 1000))

/** The session the request's cookie holds, if it is one of ours and has not expired. */
export const read = (sessions: ConsoleSessionsShape, request: HttpServerRequest.HttpServerRequest) =>
  Effect.map(nowSeconds, (now): Option.Option<Session> => {
    const token = request.cookies[cookieName]
    if (token === undefined) return Option.none()
    return Option.map(ConsoleToken.verify(sessions.key, "session", token, now), (claims) => ({
      claims,
      csrf: ConsoleToken.csrfToken(sessions.key, claims),
    }))
  })

const secure = (request: HttpServerRequest.HttpServerRequest) =>
  request.headers["x-forwarded-proto"] === "https" || request.originalUrl.startsWith("https:")

/** A new session for `caller`, and the cookie that carries it. */
export const start = (
  sessions: ConsoleSessionsShape,
  request: HttpServerRequest.HttpServerRequest,
  caller: Caller,
  seconds: number = sessions.settings.sessionSeconds,
) =>
  Effect.map(nowSeconds, (now) => {
    const claims: ConsoleToken.Claims = { caller, expiresAt: now + seconds, nonce: ConsoleToken.newNonce() }
    const cookie: Cookie = {
      name: cookieName,
      value: ConsoleToken.sign(sessions.key, "session", claims),
      options: {
        httpOnly: true,
        sameSite: "strict",
        path: "/",
        maxAge: Duration.seconds(seconds),
        secure: secure(request),
      },
    }
    return { session: { claims, csrf: ConsoleToken.csrfToken(sessions.key, claims) } satisfies Session, cookie }
  })

/** Whether a change carries the session's CSRF token. */
export const csrfHolds = (session: Session, request: HttpServerRequest.HttpServerRequest) =>
  ConsoleToken.sameToken(request.headers[csrfHeader] ?? "", session.csrf)

/**
 * The console's cookie as the admin API's `BrowserSessions`: the API's own calls from a page are
 * the page's caller, and a change among them must carry the CSRF token.
 */
export const browserSessionsLayer = Layer.effect(
  BrowserSessions,
  Effect.map(Effect.service(ConsoleSessions), (sessions) =>
    BrowserSessions.of({
      authenticate: (request) =>
        Effect.flatMap(read(sessions, request), (session) => {
          if (Option.isNone(session)) return Effect.succeed(Option.none())
          if (["GET", "HEAD", "OPTIONS"].includes(request.method) || csrfHolds(session.value, request)) {
            return Effect.succeed(Option.some(session.value.claims.caller))
          }
          return Effect.fail(
            new Unauthenticated({ detail: `a change from a console session needs its CSRF token in ${csrfHeader}` }),
          )
        }),
    }),
  ),
)
