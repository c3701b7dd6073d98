/** The `portalLinks` group's handler: signs a link with the console's key (`ConsoleToken`). */
import { Clock, Effect, Option } from "effect"
import { HttpServerRequest } from "effect/http"
import { HttpApiBuilder } from "effect/http-api"
import { ConsoleSessions } from "../console/ConsoleSession.ts"
import * as ConsoleToken from "../console/ConsoleToken.ts"
import * as AdminAccess from "./AdminAccess.ts"
import { AdminApi } from "./AdminApi.ts"
import { CurrentCaller, principal } from "./AdminAuth.ts"
import { unexpected } from "./AdminErrors.ts"
import { PortalUnavailable } from "./PortalLinksApi.ts"

const defaultSeconds = 15 * 60

const origin = (request: HttpServerRequest.HttpServerRequest) => {
  const proto = request.headers["x-forwarded-proto"] === "https" ? "https" : "http"
  return `${proto}://${request.headers["x-forwarded-host"] ?? request.headers.host ?? "localhost"}`
}

export const portalLinks = HttpApiBuilder.group(AdminApi, "portalLinks", (handlers) =>
  Effect.gen(function* () {
    const sessions = yield* Effect.serviceOption(ConsoleSessions)
    return handlers.handle("create", ({ payload }) =>
      Effect.gen(function* () {
        yield* AdminAccess.operatorOnly(yield* CurrentCaller, "a portal link is a session as its principal")
        if (Option.isNone(sessions)) {
          return yield* new PortalUnavailable({ detail: "this server mounts the admin API without the console" })
        }
        const now = Math.floor((yield* Clock.currentTimeMillis) / 1000)
        const expiresAt = now + (payload.expiresInSeconds ?? defaultSeconds)
        const token = ConsoleToken.sign(sessions.value.key, "portal-link", {
          caller: principal(payload.principal),
          expiresAt,
          nonce: ConsoleToken.newNonce(),
        })
        const path = `/console/portal/enter?token=${token}`
        const request = yield* HttpServerRequest.HttpServerRequest
        return { url: `${origin(request)}${path}`, path, expiresAt: new Date(expiresAt * 1000).toISOString() }
      }).pipe(unexpected),
    )
  }),
)
