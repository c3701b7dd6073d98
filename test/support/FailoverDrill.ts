/**
 * The failover drill's cast around `testkit/Standby`: bothy's schema on the primary, two `bothy
 * worker` processes and the CLI on the URL naming both hosts, a webhook subscription to a receiver
 * that verifies every request, and a producer (the host's `EventLog` on `Database.layer`, so it
 * follows the failover as the workers do). What the receiver got is read back as deliveries:
 * `webhook-id`, epoch, sequence and the producer's number.
 */
import { ConfigProvider, Context, Effect, Exit, Fiber, Layer, Queue, Ref } from "effect"
import { EventLog } from "../../src/log/EventLog.ts"
import * as Database from "../../src/platform/Database.ts"
import * as MigratedDatabase from "../../testkit/MigratedDatabase.ts"
import type * as Standby from "../../testkit/Standby.ts"
import * as WebhookReceiver from "../../testkit/WebhookReceiver.ts"
import * as NodeProcess from "./NodeProcess.ts"
import * as WorkerProcess from "./WorkerProcess.ts"

export interface Delivery {
  readonly id: string
  readonly epoch: number
  readonly sequence: number
  readonly n: number
}

const database = "drill"

/** Everything but the servers, on `drill`; workers started and serving. */
export const setUp = (drill: Standby.Drill) =>
  Effect.gen(function* () {
    yield* MigratedDatabase.create(drill.primary.adminUrl, database)
    const url = `${drill.bothUrl(database)}?target_session_attrs=read-write`
    const key = WorkerProcess.rawKey()
    const env = {
      DATABASE_URL: url,
      BOTHY_WEBHOOK_SECRET_KEY: key,
      BOTHY_WEBHOOK_ALLOW_HTTP_LOOPBACK: "true",
      BOTHY_CONSUMER_POLL_INTERVAL: "200ms",
    }
    const cli = NodeProcess.cli(env)
    const receiver = yield* WebhookReceiver.start(() => ({ status: 200 }))
    const created = JSON.parse(
      yield* cli(
        "subscriptions",
        "create",
        "--owner",
        "tenant",
        "--url",
        receiver.url("/hook"),
        "--scope",
        "shop",
        "--json",
      ),
    ) as { secret: string }
    receiver.trust("/hook", created.secret)
    yield* cli("grants", "add", "--principal", "tenant", "--action", "webhook_out.deliver", "--space", "shop")
    const startWorker = Effect.gen(function* () {
      const p = yield* NodeProcess.start(NodeProcess.bothy, ["worker"], env)
      yield* p.waitFor(/worker running/)
      return p
    })
    const workers = [yield* startWorker, yield* startWorker]
    // What the workers said, when the drill fails: the failover's story is in their lines.
    yield* Effect.addFinalizer((exit) =>
      Exit.isFailure(exit)
        ? Effect.sync(() => {
            for (const [i, w] of workers.entries()) console.log(`worker ${i}:\n${w.stdout()}`)
          })
        : Effect.void,
    )
    return { url, env, cli, receiver, workers, startWorker }
  })

/**
 * A producer appending `{ n }` one event at a time, from 1 on, until stopped; `acknowledged` holds
 * the numbers whose append returned. A failed append (the primary died under it) is not retried:
 * it may or may not have committed, and the drill asks only about acknowledged ones.
 */
export const produce = (url: string) =>
  Effect.gen(function* () {
    const context = yield* Layer.build(
      EventLog.layer.pipe(
        Layer.provideMerge(Database.layer),
        Layer.provide(ConfigProvider.layer(ConfigProvider.fromEnv({ env: { DATABASE_URL: url } }))),
      ),
    )
    const log = Context.get(context, EventLog)
    const acknowledged = yield* Ref.make<ReadonlyArray<number>>([])
    const next = yield* Ref.make(1)
    const one = Effect.gen(function* () {
      const n = yield* Ref.getAndUpdate(next, (x) => x + 1)
      yield* log.append([{ space: "shop", type: "order.created", actor: "bob", payload: { n } }]).pipe(
        Effect.andThen(Ref.update(acknowledged, (a) => [...a, n])),
        Effect.catchCause(() => Effect.sleep("20 millis")),
      )
    })
    const fiber = yield* Effect.forkScoped(Effect.forever(one))
    return {
      acknowledged: Ref.get(acknowledged),
      /** Waits until `count` appends in all were acknowledged. */
      until: (count: number) =>
        Effect.gen(function* () {
          while ((yield* Ref.get(acknowledged)).length < count) yield* Effect.sleep("20 millis")
        }),
      stop: Fiber.interrupt(fiber),
    }
  })

/** Takes from the receiver until every number in `wanted` has come (by its payload). */
export const receiveAll = (
  receiver: WebhookReceiver.WebhookReceiver,
  seen: Array<Delivery>,
  wanted: Iterable<number>,
) =>
  Effect.gen(function* () {
    const missing = new Set(wanted)
    for (const d of seen) missing.delete(d.n)
    while (missing.size > 0) {
      const r = yield* Queue.take(receiver.received)
      const body = JSON.parse(r.body) as { epoch: number; sequence: number; data: { n: number } }
      seen.push({ id: String(r.headers["webhook-id"]), epoch: body.epoch, sequence: body.sequence, n: body.data.n })
      missing.delete(body.data.n)
    }
  })
