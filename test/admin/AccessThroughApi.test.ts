/**
 * An operator with no code: a `bothy worker` process, a subscription and a push registration made
 * over the admin API, and the rights and membership that let them deliver given over the API and
 * with the CLI. Without the `/v1/access` routes and the `grants`/`members` commands every delivery
 * went dead with `permission`.
 */
import { randomBytes } from "node:crypto"
import { PgClient } from "@effect/sql-pg"
import { assert, describe, it, layer } from "@effect/vitest"
import { Effect, Layer, Option, Queue, Redacted } from "effect"
import { AdminAuth } from "../../src/admin/AdminAuth.ts"
import * as PermissionsMemory from "../../src/authz/PermissionsMemory.ts"
import { EventLog } from "../../src/log/EventLog.ts"
import { PushConfig } from "../../src/push/PushConfig.ts"
import * as PushService from "../../testkit/PushService.ts"
import * as WebhookReceiver from "../../testkit/WebhookReceiver.ts"
import * as NodeProcess from "../support/NodeProcess.ts"
import { environmentLines } from "../support/PushKeys.ts"
import * as TestAdmin from "../support/TestAdmin.ts"
import * as TestDatabase from "../support/TestDatabase.ts"
import * as TestPush from "../support/TestPush.ts"
import * as TestWebhooks from "../support/TestWebhooks.ts"

const token = "access-admin-token-0123456789"

describe("rights and audiences without code", () => {
  it.live(
    "GrantsAndMembershipsThroughApi: a subscription and a registration made only through the API and CLI deliver",
    () =>
      Effect.gen(function* () {
        const keys = yield* NodeProcess.run(NodeProcess.bothy, ["push", "keys"])
        const pair = environmentLines(keys.stdout)
        const { url } = yield* TestDatabase.cloneForProcesses("access")
        const service = yield* PushService.start({ applicationServerKey: pair.BOTHY_PUSH_VAPID_PUBLIC_KEY! })
        const receiver = yield* WebhookReceiver.start(() => ({ status: 200 }))
        const worker = yield* NodeProcess.start(NodeProcess.bothy, ["worker"], {
          DATABASE_URL: url,
          BOTHY_WEBHOOK_SECRET_KEY: randomBytes(32).toString("base64"),
          BOTHY_WEBHOOK_ALLOW_HTTP_LOOPBACK: "true",
          BOTHY_PUSH_HOSTS: "*",
          BOTHY_ADMIN_ADDRESS: "127.0.0.1:0",
          BOTHY_ADMIN_TOKEN: token,
          ...pair,
        })
        const admin = yield* TestAdmin.clientOf(worker, token)
        yield* worker.waitFor(/worker running \(consumers: webhooks, push;/)
        const cli = NodeProcess.cli({ DATABASE_URL: url })

        // Webhooks: the subscription and its right over HTTP.
        const created = yield* admin.post("/v1/subscriptions", {
          owner: "tenant-a",
          url: receiver.url("/hook"),
          scope: ["shop"],
        })
        assert.strictEqual(created.status, 201, JSON.stringify(created.body))
        const granted = yield* admin.post("/v1/access/grants", {
          principal: "tenant-a",
          action: "webhook_out.deliver",
          space: "shop",
        })
        assert.strictEqual(granted.status, 200, JSON.stringify(granted.body))

        // Push: the browser's registration over HTTP; membership and right with the CLI.
        const browser = PushService.browserSubscription(service, "ann0")
        const registered = yield* admin.post("/v1/registrations", { principal: "ann", subscription: browser.json })
        assert.strictEqual(registered.status, 201, JSON.stringify(registered.body))
        yield* cli("members", "add", "--space", "shop", "--principal", "ann")
        yield* cli("grants", "add", "--principal", "ann", "--action", "push.deliver", "--space", "shop")

        const listed = yield* admin.get("/v1/access/grants?space=shop")
        assert.deepStrictEqual(listed.body.items, [
          { principal: "ann", action: "push.deliver", space: "shop" },
          { principal: "tenant-a", action: "webhook_out.deliver", space: "shop" },
        ])
        const members = yield* admin.get("/v1/access/members?space=shop")
        assert.deepStrictEqual(members.body.items, [{ space: "shop", principal: "ann" }])
        assert.include(yield* cli("members", "list", "--space", "shop"), "shop\tann")

        // The host app appends an event by someone else: both reach their receivers.
        const db = PgClient.layer({ url: Redacted.make(url), maxConnections: 2 })
        yield* Effect.flatMap(EventLog, (log) =>
          log.append([{ space: "shop", type: "order.created", actor: "bob", payload: { id: 1 } }]),
        ).pipe(Effect.provide(EventLog.layer.pipe(Layer.provideMerge(db))))
        const hook = yield* Queue.take(receiver.received)
        assert.strictEqual(JSON.parse(hook.body).type, "order.created")
        const [pushed] = yield* service.take(1)
        assert.strictEqual(pushed!.subscriptionId, browser.id)

        // Operator only: a body with a typo or an unknown action is refused, nothing is granted.
        const typo = yield* admin.post("/v1/access/grants", {
          principal: "x",
          action: "webhook.deliver",
          space: "shop",
        })
        assert.strictEqual(typo.status, 400, JSON.stringify(typo.body))
        worker.child.kill("SIGTERM")
        assert.strictEqual((yield* worker.exited).code, 0)
      }).pipe(Effect.scoped),
    120_000,
  )
})

// A host's own Permissions (here the in-memory one) in place of the grants table.
const HostPermissions = PermissionsMemory.layer.pipe(
  Layer.provideMerge(TestWebhooks.layer().pipe(Layer.provideMerge(PushConfig.layerWith(TestPush.settings())))),
)

layer(HostPermissions, { excludeTestServices: true })("a host's own Permissions", (it) => {
  it.effect("GrantsAndMembershipsThroughApi: where a host replaced Permissions, the grants routes say so (409)", () =>
    Effect.gen(function* () {
      const base = yield* TestAdmin.serve(AdminAuth.token(Option.some(Redacted.make(token))))
      const admin = TestAdmin.client(base, { token })
      const refused = yield* admin.post("/v1/access/grants", {
        principal: "tenant-a",
        action: "webhook_out.deliver",
        space: "shop",
      })
      assert.strictEqual(refused.status, 409, JSON.stringify(refused.body))
      assert.strictEqual(refused.body._tag, "ModelReplaced")
      // The audience is still bothy's default here: membership is managed.
      const joined = yield* admin.post("/v1/access/members", { space: "shop", principal: "ann" })
      assert.strictEqual(joined.status, 200, JSON.stringify(joined.body))
    }).pipe(Effect.scoped),
  )
})
