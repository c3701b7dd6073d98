/**
 * bothy as users run it behind PgBouncer (Debian's 1.18, `testkit/Pooler`): `bothy worker` child
 * processes, the admin API and the CLI, and a producer (the host's `EventLog` on `Database.layer`),
 * all with `DATABASE_URL` through PgBouncer in transaction mode; a webhook receiver and a push
 * service at the other end. One worker is SIGKILLed mid-run and another takes over.
 *
 * How wake-ups come is shown, not assumed: with `DATABASE_DIRECT_URL` the workers poll only every
 * 10 minutes, so every delivery within the test's bounds was woken by a NOTIFY; without it the
 * start line says polling only, and the poll delivers; in session mode LISTEN goes through the
 * pooler itself. Every wait is on a signal (a start line, the receiver's queue, an exit).
 */
import { assert, describe, it } from "@effect/vitest"
import { ConfigProvider, Context, Effect, Layer, Queue } from "effect"
import { inject } from "vitest"
import { EventLog } from "../../src/log/EventLog.ts"
import * as Database from "../../src/platform/Database.ts"
import * as PushVapid from "../../src/push/PushVapid.ts"
import * as Pooler from "../../testkit/Pooler.ts"
import * as PushService from "../../testkit/PushService.ts"
import * as WebhookReceiver from "../../testkit/WebhookReceiver.ts"
import * as NodeProcess from "../support/NodeProcess.ts"
import * as TestAdmin from "../support/TestAdmin.ts"
import * as TestDatabase from "../support/TestDatabase.ts"
import * as WorkerProcess from "../support/WorkerProcess.ts"

const token = "pooler-admin-token-0123456789"

/** A producer on `url`, as a host app runs one: `Database.layer` finds the pooler itself. */
const producer = (url: string) =>
  Effect.map(
    Layer.build(
      EventLog.layer.pipe(
        Layer.provideMerge(Database.layer),
        Layer.provide(ConfigProvider.layer(ConfigProvider.fromEnv({ env: { DATABASE_URL: url } }))),
      ),
    ),
    (context) => (from: number, to: number) =>
      Effect.forEach(
        Array.from({ length: to - from + 1 }, (_, i) => from + i),
        (n) =>
          Context.get(context, EventLog).append([
            { space: "shop", type: "order.created", actor: "bob", payload: { n } },
          ]),
        { discard: true },
      ),
  )

interface Hook {
  readonly id: string
  readonly n: number
}

/**
 * Takes from the receiver until `count` distinct webhook ids have arrived in all; a delivery sent
 * again after a kill carries its first one's id (a receiver drops it by that id).
 */
const hooksUntil = (receiver: WebhookReceiver.WebhookReceiver, seen: Array<Hook>, count: number) =>
  Effect.gen(function* () {
    while (new Set(seen.map((h) => h.id)).size < count) {
      const r = yield* Queue.take(receiver.received)
      seen.push({ id: String(r.headers["webhook-id"]), n: (JSON.parse(r.body) as { data: { n: number } }).data.n })
    }
  }).pipe(Effect.timeout("60 seconds"))

/** Takes from the push service until `count` distinct message ids (`PushMessageKey`) have arrived in all. */
const pushesUntil = (service: PushService.PushService, seen: Array<string>, count: number) =>
  Effect.gen(function* () {
    while (new Set(seen).size < count) {
      const [m] = yield* service.take(1)
      seen.push((JSON.parse(m!.plaintext) as { id: string }).id)
    }
  }).pipe(Effect.timeout("60 seconds"))

describe("behind PgBouncer", () => {
  it.live(
    "PoolerTransactionModeRunsEverything: workers, admin API, CLI and a producer through PgBouncer in transaction mode, one worker SIGKILLed: every event reaches the webhook receiver and the push service once (by id) and webhooks in order; with DATABASE_DIRECT_URL wake-ups come by NOTIFY (10-minute poll), without it by poll and the start line says so; session mode works too",
    () =>
      Effect.gen(function* () {
        const { name, directUrl: direct } = yield* TestDatabase.cloneForProcesses("pooler_run")
        const target = Pooler.targetOf(inject("pgAdminUrl"))
        const transaction = yield* Pooler.start(target, "transaction")
        const pooled = transaction.urlOf(name)
        const vapid = PushVapid.generate()
        const service = yield* PushService.start({ applicationServerKey: vapid.publicKey })
        const receiver = yield* WebhookReceiver.start(() => ({ status: 200 }))
        const base = { ...WorkerProcess.deliveringEnv(vapid), BOTHY_ADMIN_TOKEN: token }
        const withDirect = {
          ...base,
          DATABASE_URL: pooled,
          DATABASE_DIRECT_URL: direct,
          BOTHY_CONSUMER_POLL_INTERVAL: "10m",
        }
        const worker = (env: Record<string, string>, wakeups: RegExp) =>
          Effect.gen(function* () {
            const p = yield* NodeProcess.start(NodeProcess.bothy, ["worker"], env)
            yield* Effect.addFinalizer(() => Effect.sync(() => console.log("WORKERLOG", p.stdout())))
            const line = yield* p.waitFor(wakeups)
            yield* p.waitFor(/worker running \(consumers: webhooks, push;/)
            return { p, line }
          })
        const notify = /wake-ups by NOTIFY: LISTEN over DATABASE_DIRECT_URL heard its probe/

        const first = yield* worker(withDirect, notify)
        const admin = yield* TestAdmin.clientOf(first.p, token)
        const cli = NodeProcess.cli({ DATABASE_URL: pooled })
        const created = yield* admin.post("/v1/subscriptions", {
          owner: "tenant-a",
          url: receiver.url("/hook"),
          scope: ["shop"],
        })
        assert.strictEqual(created.status, 201, JSON.stringify(created.body))
        yield* cli("grants", "add", "--principal", "tenant-a", "--action", "webhook_out.deliver", "--space", "shop")
        const browser = PushService.browserSubscription(service, "ann0")
        const registered = yield* admin.post("/v1/registrations", { principal: "ann", subscription: browser.json })
        assert.strictEqual(registered.status, 201, JSON.stringify(registered.body))
        yield* cli("members", "add", "--space", "shop", "--principal", "ann")
        yield* cli("grants", "add", "--principal", "ann", "--action", "push.deliver", "--space", "shop")

        const hooks: Array<Hook> = []
        const pushes: Array<string> = []
        const produce = yield* producer(pooled)
        yield* produce(1, 10)
        yield* hooksUntil(receiver, hooks, 10)
        yield* pushesUntil(service, pushes, 10)

        // SIGKILL, events appended while no worker runs, then a second worker takes over.
        yield* produce(11, 15)
        first.p.child.kill("SIGKILL")
        assert.strictEqual((yield* first.p.exited).signal, "SIGKILL")
        yield* produce(16, 20)
        const second = yield* worker(withDirect, notify)
        yield* produce(21, 30)
        yield* hooksUntil(receiver, hooks, 30)
        yield* pushesUntil(service, pushes, 30)
        second.p.child.kill("SIGTERM")
        assert.strictEqual((yield* second.p.exited).code, 0)

        // Without the direct URL: poll-only, said at start, and the poll delivers.
        const polling = yield* worker(
          { ...base, DATABASE_URL: pooled, BOTHY_CONSUMER_POLL_INTERVAL: "200ms" },
          /wake-ups by polling only/,
        )
        assert.include(
          polling.line,
          `DATABASE_URL goes through a transaction pooler at ${new URL(pooled).host}, which cannot carry LISTEN; set DATABASE_DIRECT_URL`,
        )
        yield* produce(31, 40)
        yield* hooksUntil(receiver, hooks, 40)
        yield* pushesUntil(service, pushes, 40)
        polling.p.child.kill("SIGTERM")
        assert.strictEqual((yield* polling.p.exited).code, 0)

        // Session mode: LISTEN through the pooler itself hears its probe (and the 10-minute poll never runs).
        const session = yield* Pooler.start(target, "session")
        const sessionUrl = session.urlOf(name)
        const sessionWorker = yield* worker(
          { ...base, DATABASE_URL: sessionUrl, BOTHY_CONSUMER_POLL_INTERVAL: "10m" },
          /wake-ups by NOTIFY: LISTEN over DATABASE_URL heard its probe/,
        )
        yield* (yield* producer(sessionUrl))(41, 50)
        yield* hooksUntil(receiver, hooks, 50)
        yield* pushesUntil(service, pushes, 50)
        sessionWorker.p.child.kill("SIGTERM")
        assert.strictEqual((yield* sessionWorker.p.exited).code, 0)

        // Once by id, and in order: each event's first webhook comes after every earlier event's.
        const firsts = hooks.filter((h, i) => hooks.findIndex((o) => o.id === h.id) === i).map((h) => h.n)
        assert.deepStrictEqual(
          firsts,
          Array.from({ length: 50 }, (_, i) => i + 1),
        )
        for (const h of hooks) {
          assert.strictEqual(hooks.find((o) => o.id === h.id)?.n, h.n, "a webhook sent again carries its first id")
        }
        assert.strictEqual(new Set(pushes).size, 50)
        assert.strictEqual(service.log.rejected.length, 0)
        assert.isTrue(receiver.log.every((r) => r.status === 200))
      }).pipe(Effect.scoped),
    240_000,
  )
})
