/**
 * One chaos run, start to verdict:
 *
 *   schedule (from the seed, printed) -> PostgreSQL (the harness's own) -> migrations -> receivers
 *   -> tenants (gap subscriptions, old events, the rest) -> consumers held behind -> 3 workers
 *   -> producers + faults (+ samples) -> every delayed half of a fault done -> drain
 *   -> SIGTERM every worker -> verdict
 *
 * The drain waits, polling once a second, until both cursors are at the head, no webhook delivery
 * is pending and no push job is unfinished (bounded by `drainTimeout`: past it the verdict says
 * what was left). Nothing of the run outlives its scope: workers, receivers, server and folder.
 */
import { randomBytes } from "node:crypto"
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { PgClient } from "@effect/sql-pg"
import { Duration, Effect, Fiber, Layer, Redacted, Result } from "effect"
import { SqlClient } from "effect/sql"
import * as PermissionGrants from "../src/authz/PermissionGrants.ts"
import * as SecretBox from "../src/crypto/SecretBox.ts"
import { EventLog } from "../src/log/EventLog.ts"
import * as PushAudience from "../src/push/PushAudience.ts"
import { PushConfig, defaults as pushDefaults } from "../src/push/PushConfig.ts"
import * as PushVapid from "../src/push/PushVapid.ts"
import { WebhookSubscriptions } from "../src/webhooks/subscriptions/WebhookSubscriptions.ts"
import { WebhookConfig } from "../src/webhooks/WebhookConfig.ts"
import * as MigratedDatabase from "../testkit/MigratedDatabase.ts"
import * as ChaosServer from "./ChaosServer.ts"
import * as ConsumerStall from "./ConsumerStall.ts"
import * as FaultInjector from "./FaultInjector.ts"
import * as FaultSchedule from "./FaultSchedule.ts"
import * as History from "./History.ts"
import * as Producers from "./Producers.ts"
import * as PushJobAudit from "./PushJobAudit.ts"
import * as PushReceiver from "./PushReceiver.ts"
import * as Receiver from "./Receiver.ts"
import * as Samples from "./Samples.ts"
import * as SeededRandom from "./SeededRandom.ts"
import * as Tenants from "./Tenants.ts"
import * as Verdict from "./Verdict.ts"
import * as VerdictControls from "./VerdictControls.ts"
import * as Workers from "./Workers.ts"
import * as World from "./World.ts"

export interface RunOptions {
  readonly seed: number
  readonly events: number
  readonly kills: number
  readonly ratePerSecond: number
  readonly producers: number
  /** Produce for this long instead of until `events` (a soak); `events` still caps it. */
  readonly durationMillis?: number
  readonly drainTimeout: Duration.Input
  readonly sampleEvery: Duration.Input
  readonly log: (line: string) => void
  /** Where the workers' logs go; by default a new folder in the temp folder, left for the operator. */
  readonly logDir?: string
}

export const workerCount = 3
const policy = { allowHttpLoopback: true, allowCidrs: [], allowHosts: [] }

/** The schedule a run with these options injects: a function of the options alone. */
export const plan = (options: Pick<RunOptions, "seed" | "events" | "kills" | "ratePerSecond" | "durationMillis">) => {
  const world = World.make(SeededRandom.make(options.seed))
  const productionMillis = options.durationMillis ?? Math.round((options.events / options.ratePerSecond) * 1000)
  const faults = FaultSchedule.make(SeededRandom.make(options.seed + 1), world, {
    productionMillis,
    kills: options.kills,
    workers: workerCount,
    quick: productionMillis < 120_000,
  })
  return { world, productionMillis, faults, text: FaultSchedule.text(options.seed, faults) }
}

const vapidKeys = () => {
  const pair = PushVapid.generate()
  const subject = "mailto:chaos@example.com"
  const checked = PushVapid.check({ ...pair, privateKey: Redacted.make(pair.privateKey), subject })
  if (Result.isFailure(checked)) throw new Error(checked.failure.message)
  return { pair, subject, checked: checked.success }
}

const drained = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const [row] = yield* sql<{ behind: number; pending: number; push: number }>`
    SELECT (SELECT count(*) FROM event_consumer_cursors AS c, event_seq AS s
             WHERE c.name IN ('webhooks', 'push') AND c.last_seq <> s.value)::int AS behind,
           (SELECT count(*) FROM webhook_deliveries WHERE state = 'pending')::int AS pending,
           (SELECT count(*) FROM jobs WHERE kind IN ('push.batch', 'push.deliver')
              AND state IN ('available', 'scheduled', 'retryable', 'running'))::int AS push`
  return row!
})

/** The environment every worker starts with, as production starts bothy. */
const workerEnv = (url: string, rawKey: string, vapid: ReturnType<typeof vapidKeys>) => ({
  DATABASE_URL: url,
  BOTHY_WEBHOOK_SECRET_KEY: rawKey,
  BOTHY_WEBHOOK_ALLOW_HTTP_LOOPBACK: "true",
  BOTHY_PUSH_VAPID_PUBLIC_KEY: vapid.pair.publicKey,
  BOTHY_PUSH_VAPID_PRIVATE_KEY: vapid.pair.privateKey,
  BOTHY_PUSH_SUBJECT: vapid.subject,
  BOTHY_PUSH_HOSTS: "*",
  // The old events are retention's to take when the schedule says, not the workers' at start.
  BOTHY_SYNC_EVENT_RETENTION: "30d",
})

/** The bothy services the harness writes the world and its faults through, on its own pool. */
const servicesLayer = (url: string, rawKey: string, vapid: PushVapid.VapidKeys) =>
  Effect.gen(function* () {
    const secretKey = yield* SecretBox.parseKey(Redacted.make(rawKey))
    const db = PgClient.layer({ url: Redacted.make(url), maxConnections: 8, applicationName: "chaos-harness" })
    return Layer.mergeAll(PermissionGrants.layer, WebhookSubscriptions.layer, PushAudience.layer).pipe(
      Layer.provideMerge(EventLog.layer),
      Layer.provideMerge(WebhookConfig.layerWith({ secretKey, policy })),
      Layer.provideMerge(
        PushConfig.layerWith({
          vapid,
          policy,
          hostPatterns: ["*"],
          ttl: pushDefaults.ttl,
          registrationMaxAge: pushDefaults.registrationMaxAge,
          maxInFlight: pushDefaults.maxInFlight,
        }),
      ),
      Layer.provideMerge(db),
    )
  })

/** Waits, a second at a time until `deadline`, for the run to drain; what was left. */
const drain = (deadline: number) =>
  Effect.gen(function* () {
    let left = yield* drained.pipe(Effect.orDie)
    while ((left.behind > 0 || left.pending > 0 || left.push > 0) && Date.now() < deadline) {
      yield* Effect.sleep("1 second")
      left = yield* drained.pipe(Effect.catch(() => Effect.succeed(left)))
    }
    return left
  })

/** The verdict on the run, and on each negative control (the run's records with one fault planted). */
const judge = (
  run: Omit<Verdict.Run, "unexpectedExits" | "startFailures" | "startFailuresUnexplained" | "receiver" | "push"> & {
    readonly receiver: Receiver.Receiver
    readonly push: PushReceiver.PushReceiver
    readonly workers: Workers.Workers
  },
) =>
  Effect.gen(function* () {
    const { workers, tenants, receiver, push, history } = run
    const judged: Verdict.Run = {
      ...run,
      unexpectedExits: workers.unexpectedExits.filter((e) => e.running).length,
      startFailures: workers.unexpectedExits.filter((e) => !e.running).length,
      startFailuresUnexplained: workers.unexpectedExits.filter((e) => !e.running && !Workers.faultExplains(e.lastLines))
        .length,
    }
    const verdict = yield* Verdict.judge(judged)
    const registrationsOf = (principal: string) =>
      tenants.registrations.filter((r) => r.principal === principal).map((r) => r.name)
    const controls = yield* Effect.forEach(VerdictControls.make(receiver, push, history, registrationsOf), (c) =>
      Effect.map(Verdict.judge({ ...judged, receiver: c.receiver, push: c.push }), (v) => ({
        name: c.name,
        counts: c.counts,
        value: v.zeros[c.counts],
      })),
    )
    return { verdict, controls }
  })

export const run = (options: RunOptions) =>
  Effect.gen(function* () {
    const { world, productionMillis, faults, text } = plan(options)
    options.log(text)
    const began = Date.now()
    const server = yield* ChaosServer.start
    yield* MigratedDatabase.create(server.adminUrl, ChaosServer.database)
    const rawKey = randomBytes(32).toString("base64")
    const vapid = vapidKeys()
    const services = yield* servicesLayer(server.url, rawKey, vapid.checked)
    const context = yield* Layer.build(services)
    yield* PushJobAudit.install.pipe(Effect.provide(context))
    return yield* Effect.gen(function* () {
      const receiver = yield* Receiver.start
      const push = yield* PushReceiver.start(vapid.pair.publicKey)
      const tenants = yield* Tenants.write(world, receiver, push)
      const stall = yield* ConsumerStall.hold(server.url)
      const logDir = options.logDir ?? mkdtempSync(join(tmpdir(), "bothy-chaos-logs-"))
      options.log(`worker logs in ${logDir}`)
      const workers = yield* Workers.make({
        count: workerCount,
        logDir,
        env: workerEnv(server.url, rawKey, vapid),
      })
      const history = History.empty()
      const samples: Array<Samples.Sample> = []
      const startedAt = Date.now()
      options.log(`producing ${options.events} events at ${options.ratePerSecond}/s with ${faults.length} faults`)
      const sampler = yield* Effect.forkChild(
        Samples.collect(samples, startedAt, workers.pids, options.sampleEvery, options.log),
      )
      const producers = yield* Effect.forkChild(
        Producers.run({
          world,
          events: options.events,
          ratePerSecond: options.ratePerSecond,
          producers: options.producers,
          seed: options.seed,
          ...(options.durationMillis === undefined
            ? {}
            : { enough: () => Date.now() - startedAt >= options.durationMillis! }),
        }),
      )
      const injected = yield* FaultInjector.run(
        { server, workers, receiver, push, tenants, stall, history },
        faults,
        startedAt,
      )
      const produced = yield* Fiber.join(producers)
      yield* injected.settled
      const producedAt = Date.now()
      options.log(
        `produced ${produced.committed.size} events in ${((producedAt - startedAt) / 1000).toFixed(1)} s; draining`,
      )
      const left = yield* drain(producedAt + Duration.toMillis(Duration.fromInputUnsafe(options.drainTimeout)))
      const drainedAt = Date.now()
      options.log(`drain ended after ${((drainedAt - producedAt) / 1000).toFixed(1)} s: ${JSON.stringify(left)}`)
      yield* Fiber.interrupt(sampler)
      const exitCodes = yield* workers.stopAll
      const { verdict, controls } = yield* judge({ world, tenants, produced, receiver, push, history, workers })
      return {
        schedule: text,
        faults,
        history,
        verdict,
        controls,
        samples,
        exitCodes,
        unexpectedExits: workers.unexpectedExits,
        workerStarts: workers.starts(),
        timings: {
          setupSeconds: (startedAt - began) / 1000,
          productionSeconds: (producedAt - startedAt) / 1000,
          drainSeconds: (drainedAt - producedAt) / 1000,
        },
        conditions: {
          seed: options.seed,
          events: options.events,
          kills: options.kills,
          ratePerSecond: options.ratePerSecond,
          producers: options.producers,
          workers: workerCount,
          plannedProductionSeconds: productionMillis / 1000,
          postgres: ChaosServer.settings,
          subscriptions: world.subscriptions.length,
          registrations: tenants.registrations.length,
          spaces: world.spaces.length,
          rollbackShare: Producers.rollbackShare,
        },
      }
    }).pipe(Effect.provide(context))
  }).pipe(Effect.scoped)

export type RunResult = Effect.Success<ReturnType<typeof run>>
