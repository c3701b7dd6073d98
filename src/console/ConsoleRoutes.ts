/**
 * The console and the tenant portal at `/console` of the admin server: one set of pages, drawn for
 * the viewer. The operator sees everything; a principal (through a portal link, or a host's own
 * `AdminAuth`) sees its own subscriptions and the catalog, and every other page is a 404.
 *
 * The pages read through the same services as the admin API, and their actions call that API from
 * the browser (`assets/console.js`), so what a principal may do is decided in one place.
 */
import { Effect, Layer } from "effect"
import { HttpRouter, HttpServerResponse } from "effect/http"
import * as ConsoleAssets from "./ConsoleAssets.ts"
import { isOperator } from "./ConsoleLayout.ts"
import * as ConsoleLogin from "./ConsoleLogin.ts"
import { get, type Route, viewerOf } from "./ConsolePage.ts"
import { ConsoleSessions } from "./ConsoleSession.ts"
import * as LagSampler from "./LagSampler.ts"
import * as DeliveryPage from "./pages/DeliveryPage.ts"
import * as EventTypesPage from "./pages/EventTypesPage.ts"
import * as JobsPage from "./pages/JobsPage.ts"
import * as OverviewPage from "./pages/OverviewPage.ts"
import * as PushPage from "./pages/PushPage.ts"
import * as SubscriptionPage from "./pages/SubscriptionPage.ts"
import * as SubscriptionsPage from "./pages/SubscriptionsPage.ts"

const home = get("/console", (request) =>
  Effect.map(viewerOf(request), (found) =>
    HttpServerResponse.redirect(
      found._tag === "None"
        ? "/console/login"
        : isOperator(found.value.viewer)
          ? "/console/overview"
          : "/console/subscriptions",
      { status: 303 },
    ),
  ),
)

/** Every console route. */
export const routes = [
  ...ConsoleLogin.routes,
  ConsoleAssets.route,
  home,
  OverviewPage.page,
  JobsPage.page,
  PushPage.page,
  EventTypesPage.page,
  SubscriptionsPage.page,
  SubscriptionPage.page,
  DeliveryPage.page,
] as const

type Needs = typeof routes extends ReadonlyArray<Route<infer R>> ? R : never

/** Mounts `routes` with the services they need, taken when the layer is built. */
export const mount = <R>(list: ReadonlyArray<Route<R>>) =>
  Layer.unwrap(
    Effect.map(Effect.context<R>(), (context) =>
      HttpRouter.addAll(
        list.map((route) =>
          HttpRouter.route(route.method, route.path, (request) =>
            Effect.provideContext(route.handler(request), context),
          ),
        ),
      ),
    ),
  )

/**
 * The console's routes for an `HttpRouter`; needs `ConsoleSessions` and what the pages read. It
 * runs the lag sampler the overview draws from (`LagSampler`) for as long as it is served.
 */
export const layer = mount<Needs>(routes).pipe(Layer.provide(LagSampler.layer))

/** `layer` with its sessions keyed from `WebhookConfig`. */
export const layerWithSessions = Layer.provide(layer, ConsoleSessions.layer)
