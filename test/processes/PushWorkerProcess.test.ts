/**
 * Push as production runs it: keys from `bothy push keys`, then `bothy worker` with `DATABASE_URL`
 * and those keys in its environment delivering to a push service that decrypts every message and
 * checks its VAPID token against the key the browser subscribed with.
 */
import { randomBytes } from "node:crypto"
import { PgClient } from "@effect/sql-pg"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Redacted } from "effect"
import * as PermissionGrants from "../../src/authz/PermissionGrants.ts"
import { EventLog } from "../../src/log/EventLog.ts"
import { PushConfig } from "../../src/push/PushConfig.ts"
import * as PushService from "../../testkit/PushService.ts"
import * as NodeProcess from "../support/NodeProcess.ts"
import { environmentLines } from "../support/PushKeys.ts"
import * as TestDatabase from "../support/TestDatabase.ts"
import * as TestPush from "../support/TestPush.ts"
import { member } from "../support/TestPushWorker.ts"

const freshDatabase = Effect.map(TestDatabase.cloneForProcesses("push"), (db) => db.url)

describe("bothy worker with push", () => {
  it.live(
    "PushWorkerDeliversWithGeneratedKeys: bothy push keys prints a pair; bothy worker with it (and DATABASE_URL) delivers an event's push, decryptable and signed with that key; without keys it says push is off; half a pair refuses the start in one line",
    () =>
      Effect.gen(function* () {
        const keys = yield* NodeProcess.run(NodeProcess.bothy, ["push", "keys"])
        assert.strictEqual(keys.code, 0, keys.stderr)
        const pair = environmentLines(keys.stdout)
        assert.deepStrictEqual(Object.keys(pair).sort(), [
          "BOTHY_PUSH_SUBJECT",
          "BOTHY_PUSH_VAPID_PRIVATE_KEY",
          "BOTHY_PUSH_VAPID_PUBLIC_KEY",
        ])

        const url = yield* freshDatabase
        const service = yield* PushService.start({ applicationServerKey: pair.BOTHY_PUSH_VAPID_PUBLIC_KEY! })
        const db = PgClient.layer({ url: Redacted.make(url), maxConnections: 2 })
        const host = Layer.mergeAll(EventLog.layer, PermissionGrants.layer).pipe(
          Layer.provideMerge(PushConfig.layerWith(TestPush.settings())),
          Layer.provideMerge(db),
        )
        const [browser] = yield* member(service, "team", "ann").pipe(Effect.provide(host))

        const env = {
          DATABASE_URL: url,
          BOTHY_WEBHOOK_SECRET_KEY: randomBytes(32).toString("base64"),
          BOTHY_WEBHOOK_ALLOW_HTTP_LOOPBACK: "true",
          BOTHY_PUSH_HOSTS: "*",
        }
        const half = yield* NodeProcess.run(NodeProcess.bothy, ["worker"], {
          ...env,
          BOTHY_PUSH_VAPID_PUBLIC_KEY: pair.BOTHY_PUSH_VAPID_PUBLIC_KEY,
        })
        assert.strictEqual(half.code, 1, half.stderr)
        assert.match(half.stderr.trim(), /^bothy: invalid configuration: push needs BOTHY_PUSH_VAPID_PRIVATE_KEY/)
        assert.strictEqual(half.stderr.trim().split("\n").length, 1, half.stderr)

        const off = yield* NodeProcess.start(NodeProcess.bothy, ["worker"], env)
        yield* off.waitFor(/push is off/)
        yield* off.waitFor(/worker running \(consumers: webhooks;/)
        off.child.kill("SIGTERM")
        assert.strictEqual((yield* off.exited).code, 0)

        const worker = yield* NodeProcess.start(NodeProcess.bothy, ["worker"], { ...env, ...pair })
        yield* worker.waitFor(/worker running \(consumers: webhooks, push;/)
        yield* Effect.gen(function* () {
          const log = yield* EventLog
          yield* log.append([{ space: "team", type: "card.created", actor: "bob", payload: { summary: "hello" } }])
        }).pipe(Effect.provide(host))
        const [message] = yield* service.take(1)
        assert.strictEqual(message!.subscriptionId, browser!.browser.id)
        assert.strictEqual(JSON.parse(message!.plaintext).summary, "hello")
        assert.strictEqual(message!.vapid.key, pair.BOTHY_PUSH_VAPID_PUBLIC_KEY)
        assert.strictEqual(service.log.rejected.length, 0)
        worker.child.kill("SIGTERM")
        const exited = yield* worker.exited
        assert.strictEqual(exited.code, 0)
        assert.notInclude(
          exited.stdout + exited.stderr,
          pair.BOTHY_PUSH_VAPID_PRIVATE_KEY!,
          "the private key is never printed",
        )
      }).pipe(Effect.scoped),
    120_000,
  )
})
