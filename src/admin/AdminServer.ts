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
import { HttpRouter, HttpServerResponse } from "effect/http"
import { HttpApiBuilder, HttpApiScalar, OpenApi } from "effect/http-api"
import { SqlClient } from "effect/sql"
import * as ConsoleRoutes from "../console/ConsoleRoutes.ts"
import * as ConsoleSession from "../console/ConsoleSession.ts"
import { EventTypeCatalog } from "../log/EventTypeCatalog.ts"
import * as BothyConfig from "../platform/BothyConfig.ts"
import * as ListenAddress from "../platform/ListenAddress.ts"
import * as OperationalEvents from "../webhooks/subscriptions/OperationalEvents.ts"
import { AdminApi, requestErrorsLayer } from "./AdminApi.ts"
import { AdminAuth, authorizationLayer } from "./AdminAuth.ts"
import * as AdminHandlers from "./AdminHandlers.ts"
import { defaultMaxBodyBytes, requestBodiesLayer, unexpectedLayer } from "./AdminRequests.ts"
import * as ReceiverWebhooks from "./ReceiverWebhooks.ts"
import * as StatusPage from "./StatusPage.ts"

export const defaultAddress = "127.0.0.1:9465"

/** `BOTHY_ADMIN_ADDRESS` (`admin.address`). */
export const loadAddress = BothyConfig.setting("admin.address", defaultAddress, (raw) =>
  ListenAddress.parse(raw, defaultAddress),
)

/** The bounds of `admin.max_body_bytes`: a subscription with a full scope fits in the least. */
export const maxBodyBytesBounds = { min: 1024, max: 64 * 1_048_576 }

/**
 * `BOTHY_ADMIN_MAX_BODY_BYTES` (`admin.max_body_bytes`): the largest request body the API reads,
 * in bytes (1 MiB by default, 1 KiB to 64 MiB); a larger one is a 413 (`AdminRequests`).
 */
export const loadMaxBodyBytes = BothyConfig.setting(
  "admin.max_body_bytes",
  String(defaultMaxBodyBytes),
  BothyConfig.parseCount(maxBodyBytesBounds.min, maxBodyBytesBounds.max),
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
 * The OpenAPI document with the event-type catalog as it is now under `webhooks`: read at each
 * request, so a type added is listed at once.
 */
export const openApiDocument = Effect.gen(function* () {
  const catalog = yield* EventTypeCatalog.makeWith({ builtIn: OperationalEvents.catalogEntries })
  return ReceiverWebhooks.addTypes(OpenApi.fromApi(AdminApi) as unknown as Record<string, unknown>, yield* catalog.list)
})

// The pool is taken when the routes are built, as the API's handlers take theirs.
const openApiRoute = Layer.unwrap(
  Effect.map(Effect.service(SqlClient.SqlClient), (sql) =>
    HttpRouter.add(
      "GET",
      "/openapi.json",
      openApiDocument.pipe(
        Effect.provideService(SqlClient.SqlClient, sql),
        Effect.map((document) => HttpServerResponse.jsonUnsafe(document)),
        Effect.catch((e) =>
          Effect.logError("admin API: the OpenAPI document failed", e).pipe(
            Effect.as(HttpServerResponse.empty({ status: 500 })),
          ),
        ),
      ),
    ),
  ),
)

/** How the API reads requests. */
export interface RoutesOptions {
  /** The largest request body read, in bytes (`admin.max_body_bytes`; 1 MiB when absent). */
  readonly maxBodyBytes?: number
}

/**
 * The API's routes, `/openapi.json` and `/docs`, for any `HttpRouter`, with a body limit of
 * `maxBodyBytes`. Needs `AdminAuth`, `WebhookSubscriptions`, `Permissions`, the pool,
 * `PushConfig` when push is on (registrations), and the HTTP platform services a Node server provides.
 */
export const routesWith = (options: RoutesOptions = {}) =>
  Layer.mergeAll(HttpApiBuilder.layer(AdminApi), openApiRoute, HttpApiScalar.layer(AdminApi, { path: "/docs" })).pipe(
    Layer.provide(AdminHandlers.layer),
    Layer.provide([
      authorizationLayer,
      requestErrorsLayer,
      requestBodiesLayer(options.maxBodyBytes ?? defaultMaxBodyBytes),
      unexpectedLayer,
    ]),
  )

/** `routesWith` the default body limit (1 MiB). */
export const routes = routesWith()

/**
 * `routesWith` and the console (`/console`, with its sessions keyed from `WebhookConfig`) for a
 * host's own `HttpRouter`, as `layer` serves them: the API takes the console's cookie (and its
 * CSRF token) beside what the host's `AdminAuth` admits. Needs, besides what `routesWith` needs,
 * `EventLog` and the consumers' settings the pages read.
 */
export const routesWithConsole = (options: RoutesOptions = {}) =>
  Layer.mergeAll(
    routesWith(options).pipe(Layer.provide(ConsoleSession.browserSessionsLayer)),
    ConsoleRoutes.layer,
  ).pipe(Layer.provide(ConsoleSession.ConsoleSessions.layer))

export interface ServeOptions<R> extends RoutesOptions {
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
      const api = routesWith(options.maxBodyBytes === undefined ? {} : { maxBodyBytes: options.maxBodyBytes }).pipe(
        Layer.provide(ConsoleSession.browserSessionsLayer),
      )
      // Read here, so that a bad console setting stops the start with the setting named.
      const sessions = yield* ConsoleSession.ConsoleSessions.load
      const served = Layer.mergeAll(api, ConsoleRoutes.layer, StatusPage.layer({ auth }), extra).pipe(
        Layer.provide(Layer.succeed(ConsoleSession.ConsoleSessions, sessions)),
      )
      return ListenAddress.serve(address, served, {
        announce: (url) =>
          Effect.andThen(
            Effect.logInfo(
              `admin API served on ${url} (console: ${url}/console, status page: ${url}/, docs: ${url}/docs)`,
            ),
            options.onServed?.(url) ?? Effect.void,
          ),
        unavailable: (address, reason) => new AdminAddressUnavailable({ address, reason }),
      })
    }),
  )
