/**
 * What the push benchmark's parts share: push settings for a loopback push service, the worker
 * side as `bothy worker` composes it for push, and members with the right to receive and one
 * registration each.
 *
 * Spaces are named as the webhook benchmarks name them (`WebhookSample.spaceOf`), so the producer
 * thread's event i lands in space `bench-(i mod spaces)`; its actor (`user:…`) is never a member.
 */
import { Duration, Effect, Layer, Redacted, Result } from "effect"
import { SqlClient } from "effect/sql"
import * as PermissionGrants from "../../src/authz/PermissionGrants.ts"
import { pushDeliver } from "../../src/authz/Permissions.ts"
import { Jobs } from "../../src/jobs/Jobs.ts"
import * as JobWorker from "../../src/jobs/JobWorker.ts"
import { EventLog } from "../../src/log/EventLog.ts"
import { NotificationStream } from "../../src/platform/NotificationStream.ts"
import * as PushAudience from "../../src/push/PushAudience.ts"
import { defaults, PushConfig, type PushSettings } from "../../src/push/PushConfig.ts"
import * as PushDelivery from "../../src/push/PushDelivery.ts"
import * as PushFanOut from "../../src/push/PushFanOut.ts"
import * as PushRegistrations from "../../src/push/PushRegistrations.ts"
import * as PushVapid from "../../src/push/PushVapid.ts"
import type { BenchServer } from "../harness/BenchServer.ts"
import type { BenchPushService } from "./BenchPushService.ts"

/** Push on, with a fresh key pair; http to loopback allowed and any host (the push service is local). */
export const settings = (): PushSettings => {
  const pair = PushVapid.generate()
  const checked = PushVapid.check({
    ...pair,
    privateKey: Redacted.make(pair.privateKey),
    subject: "mailto:push-bench@example.com",
  })
  if (Result.isFailure(checked)) throw checked.failure
  return {
    vapid: checked.success,
    policy: { allowHttpLoopback: true, allowCidrs: [], allowHosts: [] },
    hostPatterns: ["*"],
    ttl: defaults.ttl,
    registrationMaxAge: defaults.registrationMaxAge,
    maxInFlight: defaults.maxInFlight,
    batchSize: defaults.batchSize,
  }
}

export interface Member {
  readonly space: string
  readonly principal: string
}

export interface Registered extends Member {
  /** The push service's index of the browser subscription (its endpoint ends in `/push/<index>`). */
  readonly subscription: number
  readonly registration: string
}

/**
 * Each member joins its space, gets `push.deliver` there and registers one new browser
 * subscription, through the public functions, in one transaction (one commit, not three per member).
 */
export const populate = (service: BenchPushService, members: ReadonlyArray<Member>, push: PushSettings) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const browsers = yield* service.subscribe(members.length)
    return yield* sql.withTransaction(
      Effect.forEach(members, (m, k) =>
        Effect.gen(function* () {
          yield* PushAudience.join(m.space, m.principal)
          yield* PermissionGrants.grant(m.principal, pushDeliver, m.space)
          const { id } = yield* PushRegistrations.register(m.principal, browsers[k]!)
          const subscription = Number(browsers[k]!.endpoint.slice(browsers[k]!.endpoint.lastIndexOf("/") + 1))
          return { ...m, subscription, registration: id } satisfies Registered
        }),
      ),
    )
  }).pipe(Effect.provide(PushConfig.layerWith(push)))

export interface WorkerOptions {
  readonly connections: number
  readonly batchSize: number
  readonly pollInterval: Duration.Input
  readonly cooldownMs: number
  readonly concurrency: number
  /** `PushVapid.TokenCacheOptions.signEach`: a new VAPID token for every request. */
  readonly signEach: boolean
}

/**
 * The worker side for push, in the current scope, as `bothy worker` composes it: one pool shared by
 * `PushFanOut.layer` (the one-statement round over the default audience) and `JobWorker.layer` with
 * `PushDelivery` on the `push` queue, plus `NotificationStream`'s LISTEN connection. `tracer` sees
 * its spans. Returns once the consumer's start-up round has run and the LISTEN connection is up.
 */
export const startWorker = (
  server: BenchServer["Service"],
  push: PushSettings,
  options: WorkerOptions,
  roundsEnded: () => number,
  tracer: Parameters<typeof Effect.withTracer>[1],
) =>
  Effect.gen(function* () {
    const base = yield* Layer.build(
      Layer.mergeAll(
        EventLog.layer,
        Jobs.layer,
        PermissionGrants.layer,
        PushAudience.layer,
        NotificationStream.layer(),
      ).pipe(Layer.provideMerge(PushConfig.layerWith(push)), Layer.provideMerge(server.pool(options.connections))),
    )
    yield* Effect.gen(function* () {
      const deliver = yield* PushDelivery.makeWith({ tokens: { signEach: options.signEach } })
      yield* Layer.build(
        Layer.merge(
          PushFanOut.layer({
            batchSize: options.batchSize,
            pollInterval: options.pollInterval,
            cooldown: Duration.millis(options.cooldownMs),
          }),
          JobWorker.layer({ kinds: [deliver], queues: { [PushFanOut.queue]: { concurrency: options.concurrency } } }),
        ),
      )
    }).pipe(Effect.provide(base), Effect.withTracer(tracer))
    const stream = yield* NotificationStream.pipe(Effect.provide(base))
    yield* Effect.gen(function* () {
      while (roundsEnded() === 0 || (yield* stream.backendPid)._tag === "None") yield* Effect.sleep("10 millis")
    }).pipe(Effect.timeout("30 seconds"), Effect.orDie)
    return base
  })

/** A clean slate for a run: no jobs, the `push` cursor at the head, tables vacuumed, a checkpoint; the head. */
export const reset = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`TRUNCATE jobs`
  yield* sql`
    UPDATE event_consumer_cursors SET last_seq = (SELECT value FROM event_seq) WHERE name = ${PushFanOut.name}`
  yield* sql.unsafe(
    "VACUUM ANALYZE jobs, event_consumer_cursors, push_registrations, space_members, permission_grants, notification_preferences",
  )
  // The set-up's pages are written now, not by a checkpoint inside the measured window.
  yield* sql.unsafe("CHECKPOINT")
  const [row] = yield* sql<{ head: bigint; connections: number }>`
    SELECT value AS head, (SELECT count(*)::int FROM pg_stat_activity WHERE backend_type = 'client backend') AS connections
    FROM event_seq`
  // Every run's pools and threads end with it: a run that starts among more connections than the
  // benchmark's own pool and listener inherited some.
  yield* Effect.logDebug(`push bench reset: ${row!.connections} client connections`)
  return { head: row!.head, connectionsAtStart: row!.connections }
})

/** Jobs of the `push` queue not final yet (available, scheduled, running, retryable). */
export const pendingJobs = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const [row] = yield* sql<{ n: number }>`
    SELECT count(*)::int AS n FROM jobs
    WHERE queue = ${PushFanOut.queue} AND state IN ('available', 'scheduled', 'running', 'retryable')`
  return row!.n
})

/** A `push.batch` job as it ended: its event (the args keep the seq; the registrations left are rewritten as it runs) and its errors. */
export interface JobRow {
  readonly id: string
  readonly seq: string
  readonly state: string
  readonly attempt: number
  readonly errors: number
  readonly lastError: string | null
}

/**
 * What became of the `push.batch` jobs of a run: by state, each job's event by id, and the jobs
 * that recorded an error (a retry, a dead registration named in the reason). Which registration a
 * job carried is not read here: its args list only what is left, so the receipts say who got what.
 */
export const jobsOfRun = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const rows = yield* sql<JobRow>`
    SELECT id::text AS id, args ->> 'seq' AS seq, state::text AS state, attempt::int AS attempt,
           jsonb_array_length(errors)::int AS errors, errors -> -1 ->> 'message' AS "lastError"
    FROM jobs WHERE kind = ${PushFanOut.deliverKind}`
  const states: Record<string, number> = {}
  for (const r of rows) states[r.state] = (states[r.state] ?? 0) + 1
  const failed = rows.filter((r) => r.errors > 0)
  return {
    rows,
    states,
    withErrors: failed.length,
    firstErrors: failed.slice(0, 5).map((r) => ({ id: r.id, seq: r.seq, state: r.state, lastError: r.lastError })),
  }
})
