/**
 * A host that mounts bothy's admin routes in its own router, behind its own `AdminAuth`, gets the
 * console with them (`AdminServer.routesWithConsole`): its user sees their subscriptions as a
 * principal, the operator's pages are a 404 to them, and the API beside it answers as before.
 */
import { assert, layer } from "@effect/vitest"
import { Deferred, Effect, Layer, Option } from "effect"
import * as AdminAuth from "../../src/admin/AdminAuth.ts"
import * as AdminServer from "../../src/admin/AdminServer.ts"
import * as ListenAddress from "../../src/platform/ListenAddress.ts"
import * as TestAdmin from "../support/TestAdmin.ts"
import * as TestWebhooks from "../support/TestWebhooks.ts"

/** The host's users as principals, from a header its gateway sets (as docs/admin.md shows). */
const HostAuth = Layer.succeed(
  AdminAuth.AdminAuth,
  AdminAuth.AdminAuth.make((request) => {
    const user = request.headers["x-user"]
    return user === undefined
      ? Effect.fail(new AdminAuth.Unauthenticated({ detail: "sign in first" }))
      : Effect.succeed(AdminAuth.principal(user))
  }),
)

/** The host's own server: only bothy's routes with the console here, on 127.0.0.1:0; its URL. */
const hostServer = Effect.gen(function* () {
  const served = yield* Deferred.make<string>()
  yield* Layer.build(
    ListenAddress.serve(
      Option.some({ host: "127.0.0.1", port: 0 }),
      AdminServer.routesWithConsole().pipe(Layer.provide(HostAuth), Layer.orDie),
      {
        announce: (url) => Deferred.succeed(served, url).pipe(Effect.asVoid),
        unavailable: (address, reason) => new Error(`${address}: ${reason}`),
      },
    ),
  )
  return yield* Deferred.await(served)
})

layer(TestWebhooks.layer(), { excludeTestServices: true })("the console in a host's router", (it) => {
  it.effect(
    "ConsoleInHostRouter: mounted with the API in a host's router behind its AdminAuth, the console shows a user their own subscriptions, the operator's pages are a 404 to them, and the API answers beside it",
    () =>
      Effect.gen(function* () {
        const base = yield* hostServer
        yield* TestWebhooks.subscribe("host-user", "http://127.0.0.1:9/host-user", ["host-space"])
        yield* TestWebhooks.subscribe("someone-else", "http://127.0.0.1:9/someone-else", ["host-space"])
        const as = { headers: { "x-user": "host-user" } }

        const page = yield* TestAdmin.call(base, "GET", "/console/subscriptions", as)
        assert.strictEqual(page.status, 200)
        assert.include(page.body, "http://127.0.0.1:9/host-user")
        assert.notInclude(page.body, "someone-else")
        assert.include(page.headers.get("content-security-policy") ?? "", "script-src 'self'")
        assert.strictEqual((yield* TestAdmin.call(base, "GET", "/console/overview", as)).status, 404)
        const script = yield* TestAdmin.call(base, "GET", "/console/assets/console.js", as)
        assert.strictEqual(script.status, 200, "the assets are served from the package")

        const api = yield* TestAdmin.call(base, "GET", "/v1/subscriptions", as)
        assert.strictEqual(api.status, 200)
        assert.deepStrictEqual(
          api.body.items.map((s: { owner: string }) => s.owner),
          ["host-user"],
        )
        const anonymous = yield* TestAdmin.call(base, "GET", "/console/subscriptions")
        assert.notInclude(String(anonymous.body), "host-user", "nothing without the host's sign-in")
      }),
  )
})
