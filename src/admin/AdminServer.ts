/**
 * The admin server: the API's routes, its OpenAPI 3.1 document at `/openapi.json`, a docs page
 * at `/docs` (Scalar, inlined: it works offline) and the status page at `/` (`StatusPage`, the
 * operator's: behind the same `AdminAuth` as the API), on `admin.address` (`BOTHY_ADMIN_ADDRESS`,
 * loopback `127.0.0.1:9465` by default, `off` for none). `bothy worker` serves it; a host app can
 * mount `routes` into its own router instead.
 *
 * What it keeps true: an API that lets everyone in (`AdminAuth.token` without a token) is never
 * served beyond this machine: on a non-loopback address the start is refused with
 * `AdminTokenRequired`. An address that cannot be had stops the start with
 * `AdminAddressUnavailable`, naming the setting.
 */
import { Effect, Layer, Option, Schema } from "effect"
import { HttpApiBuilder, HttpApiScalar } from "effect/http-api"
import * as BothyConfig from "../platform/BothyConfig.ts"
import * as ListenAddress from "../platform/ListenAddress.ts"
import { AdminApi, requestErrorsLayer } from "./AdminApi.ts"
import { AdminAuth, authorizationLayer } from "./AdminAuth.ts"
import * as AdminHandlers from "./AdminHandlers.ts"
import * as StatusPage from "./StatusPage.ts"

export const defaultAddress = "127.0.0.1:9465"

/** `BOTHY_ADMIN_ADDRESS` (`admin.address`). */
export const loadAddress = BothyConfig.setting("admin.address", defaultAddress, (raw) =>
  ListenAddress.parse(raw, defaultAddress),
)

export class AdminAddressUnavailable extends Schema.TaggedError<AdminAddressUnavailable>()("AdminAddressUnavailable", {
  address: Schema.String,
  reason: Schema.String,
}) {
  override get message() {
    return `the admin API cannot listen on ${this.address} (BOTHY_ADMIN_ADDRESS, admin.address): ${this.reason}; give another address, or off`
  }
}

export class AdminTokenRequired extends Schema.TaggedError<AdminTokenRequired>()("AdminTokenRequired", {
  address: Schema.String,
}) {
  override get message() {
    return `the admin API would be open to anyone on ${this.address}: set BOTHY_ADMIN_TOKEN (admin.token), or listen on a loopback address (BOTHY_ADMIN_ADDRESS, admin.address)`
  }
}

/**
 * The API's routes, `/openapi.json` and `/docs`, for any `HttpRouter`. Needs `AdminAuth`,
 * `WebhookSubscriptions`, `Permissions`, the pool, `PushConfig` when push is on (registrations),
 * and the HTTP platform services a Node server provides.
 */
export const routes = Layer.mergeAll(
  HttpApiBuilder.layer(AdminApi, { openapiPath: "/openapi.json" }),
  HttpApiScalar.layer(AdminApi, { path: "/docs" }),
).pipe(Layer.provide(AdminHandlers.layer), Layer.provide([authorizationLayer, requestErrorsLayer]))

export interface ServeOptions<R> {
  /** More routes on the same server (the status page's). */
  readonly extra?: Layer.Layer<never, never, R>
  /** Hears the bound URL once the server listens (port 0 resolved), besides the start line. */
  readonly onServed?: (url: string) => Effect.Effect<void>
}

/** Serves `routes`, the status page (and `extra`) on `address`, logging their URLs; nothing when it is off. */
export const layer = <R = never>(address: ListenAddress.ListenAddress, options: ServeOptions<R> = {}) =>
  Layer.unwrap(
    Effect.gen(function* () {
      const auth = yield* AdminAuth
      if (Option.isSome(address) && auth.open === true && !ListenAddress.isLoopback(address.value.host)) {
        return yield* new AdminTokenRequired({ address: ListenAddress.format(address.value) })
      }
      const extra = options.extra ?? (Layer.empty as Layer.Layer<never, never, R>)
      return ListenAddress.serve(address, Layer.mergeAll(routes, StatusPage.layer({ auth }), extra), {
        announce: (url) =>
          Effect.andThen(
            Effect.logInfo(`admin API served on ${url} (status page: ${url}/, docs: ${url}/docs)`),
            options.onServed?.(url) ?? Effect.void,
          ),
        unavailable: (address, reason) => new AdminAddressUnavailable({ address, reason }),
      })
    }),
  )
