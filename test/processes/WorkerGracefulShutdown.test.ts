/**
 * The real `bothy worker` stopped with SIGTERM in the middle of deliveries, then started again:
 * nothing is lost (every event reaches its receiver, in seq order, numbered 1..N without a gap)
 * and nothing is left running.
 */
import { randomBytes } from "node:crypto"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Queue, Redacted } from "effect"
import { SqlClient } from "effect/sql"
import * as PermissionGrants from "../../src/authz/PermissionGrants.ts"
import { webhookDeliver } from "../../src/authz/Permissions.ts"
import * as SecretBox from "../../src/crypto/SecretBox.ts"
import { EventLog } from "../../src/log/EventLog.ts"
import * as WebhookReceiver from "../../testkit/WebhookReceiver.ts"
import * as NodeProcess from "../support/NodeProcess.ts"
import * as TestDatabase from "../support/TestDatabase.ts"
import * as TestWebhooks from "../support/TestWebhooks.ts"

const events = 150

describe("bothy worker graceful shutdown", () => {
  it.live(
    "WorkerGracefulShutdownLosesNothing: SIGTERM while deliveries are going out stops the worker with exit 0 and no job left running; started again, it delivers the rest: every event arrives, in seq order, under one webhook-id (a request cut off is sent again as the same message), sequence 1..N without a gap",
    () =>
      Effect.gen(function* () {
        const { name, url } = yield* TestDatabase.cloneForProcesses("graceful")
        const rawKey = randomBytes(32).toString("base64")
        const secretKey = yield* SecretBox.parseKey(Redacted.make(rawKey))
        // A slow receiver (100 ms a request), so the stop comes while requests are out and the drain
        // outlasts the 10 s the shutdown gives running jobs.
        const receiver = yield* WebhookReceiver.start(() => ({
          status: 200,
          after: new Promise((resolve) => setTimeout(resolve, 100)),
        }))
        const host = TestWebhooks.layerAt(name, { secretKey })
        yield* Effect.gen(function* () {
          yield* PermissionGrants.grant("owner-g", webhookDeliver, "g")
          yield* TestWebhooks.subscribe("owner-g", receiver.url("/g"), ["g"])
          const log = yield* EventLog
          for (let i = 0; i < events; i++)
            yield* log.append([{ space: "g", type: "item.created", actor: "a", payload: { i } }])
        }).pipe(Effect.provide(host))
        const env = {
          DATABASE_URL: url,
          BOTHY_WEBHOOK_SECRET_KEY: rawKey,
          BOTHY_WEBHOOK_ALLOW_HTTP_LOOPBACK: "true",
        }

        const first = yield* NodeProcess.start(NodeProcess.bothy, ["worker"], env)
        yield* first.waitFor(/worker running/)
        for (let n = 0; n < 20; n++) yield* Queue.take(receiver.received)
        first.child.kill("SIGTERM")
        const stopped = yield* first.exited
        assert.strictEqual(stopped.code, 0, stopped.stderr)
        assert.match(stopped.stdout, /stopping/)
        const afterStop = receiver.log.length
        assert.isBelow(afterStop, events, "the stop came before the end")

        const state = Effect.gen(function* () {
          const sql = yield* SqlClient.SqlClient
          const [row] = yield* sql<{ running: number; pending: number }>`
            SELECT (SELECT count(*) FROM jobs WHERE state = 'running')::int AS running,
                   (SELECT count(*) FROM webhook_deliveries WHERE state = 'pending')::int AS pending`
          return row!
        }).pipe(Effect.provide(host))
        assert.strictEqual((yield* state).running, 0, "no job left running")

        const second = yield* NodeProcess.start(NodeProcess.bothy, ["worker"], env)
        yield* second.waitFor(/worker running/)
        const arrived = () => new Set(receiver.log.map((r) => TestWebhooks.envelope(r).data.i)).size
        while (arrived() < events) yield* Queue.take(receiver.received)
        second.child.kill("SIGTERM")
        assert.strictEqual((yield* second.exited).code, 0)

        const bodies = receiver.log.map((r) => TestWebhooks.envelope(r))
        const firstOf = new Map<number, TestWebhooks.Envelope>()
        for (const b of bodies) if (!firstOf.has(b.data.i)) firstOf.set(b.data.i, b)
        assert.strictEqual(firstOf.size, events, "every event arrived")
        // In seq order: the first arrival of each event is in order of its i.
        const order = bodies.map((b) => b.data.i).filter((i, k, a) => a.indexOf(i) === k)
        assert.deepStrictEqual(
          order,
          [...order].sort((a, b) => a - b),
        )
        assert.deepStrictEqual(
          [...firstOf.values()].map((b) => Number(b.sequence)).sort((a, b) => a - b),
          Array.from({ length: events }, (_, k) => k + 1),
        )
        // A request cut off by the stop is sent again, as the same message.
        const ids = new Map<number, Set<string>>()
        for (const r of receiver.log) {
          const i = TestWebhooks.envelope(r).data.i
          ids.set(i, (ids.get(i) ?? new Set()).add(String(r.headers["webhook-id"])))
        }
        assert.isTrue(
          [...ids.values()].every((set) => set.size === 1),
          "one webhook-id per event",
        )
        const end = yield* state
        assert.deepStrictEqual(end, { running: 0, pending: 0 })
      }).pipe(Effect.scoped),
    180_000,
  )
})
