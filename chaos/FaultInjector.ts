/**
 * Carries out a fault schedule against the running system, each fault at its offset from the start
 * of production, one after another; the second half of a fault (a restart, a grant restored, a
 * subscription enabled again) runs in a fiber of its own after its delay, and `settled` waits for
 * all of them. Every statement the harness runs is retried while PostgreSQL is down. What it did,
 * and when, goes into the `History`.
 */
import { Duration, Effect, Fiber, Schedule } from "effect"
import { SqlClient } from "effect/sql"
import * as PermissionGrants from "../src/authz/PermissionGrants.ts"
import * as Retention from "../src/log/Retention.ts"
import { WebhookSubscriptions } from "../src/webhooks/subscriptions/WebhookSubscriptions.ts"
import type { ChaosServer } from "./ChaosServer.ts"
import type * as ConsumerStall from "./ConsumerStall.ts"
import * as FaultSchedule from "./FaultSchedule.ts"
import type * as History from "./History.ts"
import type { PushReceiver } from "./PushReceiver.ts"
import type { Receiver } from "./Receiver.ts"
import type { Tenants } from "./Tenants.ts"
import type { Workers } from "./Workers.ts"

/** Retries a harness statement while the server is down or restarting (a minute at most). */
const persist = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  effect.pipe(Effect.retry({ schedule: Schedule.spaced("500 millis"), times: 120 }))

/** How long a 410 may take to disable its subscription before the harness reports it. */
const goneGuardMillis = 5 * 60_000

export interface Context {
  readonly server: ChaosServer
  readonly workers: Workers
  readonly receiver: Receiver
  readonly push: PushReceiver
  readonly tenants: Tenants
  readonly stall: Effect.Success<ReturnType<typeof ConsumerStall.hold>>
  readonly history: History.History
}

/** What every fault's action works with: the run's parts and the harness's own tools. */
interface Tools extends Context {
  readonly sql: SqlClient.SqlClient
  readonly webhooks: WebhookSubscriptions["Service"]
  /** Runs `effect` after `millis` in a fiber of its own, which `settled` waits for. */
  readonly after: <A, E, R>(millis: number, effect: Effect.Effect<A, E, R>) => Effect.Effect<unknown, never, R>
  readonly note: (f: FaultSchedule.Fault, detail?: string) => Effect.Effect<void>
  readonly subscription: (name: string) => Tenants["subscriptions"][number]
  /** Enabled again from its first seq, so every event it matches gets exactly one delivery. */
  readonly enableFromStart: (name: string) => Effect.Effect<void, unknown>
}

type Action = Effect.Effect<void, unknown, SqlClient.SqlClient>

type FaultOf<K extends FaultSchedule.Kind> = Extract<FaultSchedule.Fault, { readonly kind: K }>

/**
 * Polls `done` every half second until it holds, for at most the guard: a fault never acted on is
 * reported as not carried out, not waited for forever.
 */
const awaitDone = (
  tools: Tools,
  f: FaultSchedule.Fault,
  done: Effect.Effect<boolean, unknown, SqlClient.SqlClient>,
  failure: string,
  then: Action,
): Action =>
  Effect.gen(function* () {
    const until = Date.now() + goneGuardMillis
    while (!(yield* persist(done))) {
      if (Date.now() > until) {
        tools.history.failed.push({ kind: f.kind, detail: failure })
        return
      }
      yield* Effect.sleep("500 millis")
    }
    yield* then
  })

const terminateBackends = (tools: Tools, f: FaultOf<"terminate-backends">): Action =>
  Effect.gen(function* () {
    const rows = yield* tools.sql<{ pid: number }>`
      SELECT pid FROM pg_stat_activity
      WHERE datname = current_database() AND application_name LIKE 'bothy%' ORDER BY pid`
    const pids = [
      ...new Set(Array.from({ length: f.count }, (_, j) => rows[(f.pick + j * 7919) % Math.max(1, rows.length)]?.pid)),
    ]
    for (const pid of pids) if (pid !== undefined) yield* tools.sql`SELECT pg_terminate_backend(${pid})`
    yield* tools.note(f, `${FaultSchedule.describe(f)}: pids ${pids.join(", ")} of ${rows.length}`)
  })

const revoke = (tools: Tools, f: FaultOf<"revoke">): Action =>
  Effect.gen(function* () {
    const { principal, action, space } = f.grant
    const revokeFrom = Date.now()
    yield* persist(PermissionGrants.revoke(principal, action, space))
    const window: History.GrantWindow = {
      grant: f.grant,
      revokeFrom,
      revokeTo: Date.now(),
      restoreFrom: Number.POSITIVE_INFINITY,
      restoreTo: Number.POSITIVE_INFINITY,
    }
    tools.history.grantWindows.push(window)
    yield* tools.note(f)
    yield* tools.after(
      f.restoreAfter,
      Effect.gen(function* () {
        window.restoreFrom = Date.now()
        yield* persist(PermissionGrants.grant(principal, action, space))
        window.restoreTo = Date.now()
      }),
    )
  })

const webhookGone = (tools: Tools, f: FaultOf<"webhook-gone">): Action =>
  Effect.gen(function* () {
    tools.receiver.gone(f.subscription)
    yield* tools.note(f)
    const id = tools.subscription(f.subscription).id
    const gone = Effect.map(tools.webhooks.get(id), (s) => s.state === "disabled" && s.disabledCause === "gone")
    // Until its drainer has had the 410 (a subscription that hears of no event waits); then the
    // endpoint is back (its owner fixed it) and the subscription enabled again from its first seq.
    const back = Effect.andThen(
      Effect.sync(() => tools.receiver.back(f.subscription)),
      persist(tools.enableFromStart(f.subscription)),
    )
    yield* tools.after(0, awaitDone(tools, f, gone, `${f.subscription} was not disabled gone within 5 minutes`, back))
  })

const pushGone = (tools: Tools, f: FaultOf<"push-gone">): Action =>
  Effect.gen(function* () {
    tools.push.gone(f.registration)
    yield* tools.note(f)
    const id = tools.tenants.registrations.find((r) => r.name === f.registration)!.id
    const removed = tools.sql`SELECT 1 FROM push_registrations WHERE id = ${id}::bigint`.pipe(
      Effect.map((rows) => rows.length === 0),
    )
    const seen = Effect.sync(() => {
      tools.history.pushRemovedAt = Date.now()
    })
    yield* tools.after(0, awaitDone(tools, f, removed, `${f.registration} was not removed within 5 minutes`, seen))
  })

const retentionGap = (tools: Tools, f: FaultSchedule.Fault): Action =>
  Effect.gen(function* () {
    // A worker's own run may hold the retention lease: wait it out, the gap is this fault's point.
    const retention = yield* persist(
      Retention.run({ retention: Duration.days(7), dropPause: Duration.millis(20) }),
    ).pipe(Effect.repeat({ while: (r) => r.busy, schedule: Schedule.spaced("500 millis") }))
    tools.history.gap = { at: Date.now(), cursors: tools.stall.cursors, dropped: retention.dropped }
    yield* tools.stall.release
    yield* tools.note(f, `${FaultSchedule.describe(f)}: dropped ${retention.dropped.join(", ") || "nothing"}`)
  })

const perform = (tools: Tools, f: FaultSchedule.Fault): Action => {
  switch (f.kind) {
    case "sigkill":
    case "sigterm":
      return Effect.gen(function* () {
        yield* tools.note(f)
        yield* tools.workers.signal(f.worker, f.kind === "sigkill" ? "SIGKILL" : "SIGTERM")
        yield* tools.after(f.restartAfter, tools.workers.start(f.worker))
      })
    case "terminate-backends":
      return terminateBackends(tools, f)
    case "pg-restart":
      return Effect.andThen(tools.note(f), tools.server.restart(f.down))
    case "revoke":
      return revoke(tools, f)
    case "disable":
      return Effect.gen(function* () {
        yield* persist(tools.webhooks.disable(tools.subscription(f.subscription).id))
        yield* tools.note(f)
        yield* tools.after(f.enableAfter, persist(tools.enableFromStart(f.subscription)))
      })
    case "webhook-answer":
      return Effect.andThen(
        Effect.sync(() => tools.receiver.script(f.subscription, f.answer, f.count)),
        tools.note(f),
      )
    case "webhook-gone":
      return webhookGone(tools, f)
    case "push-answer":
      return Effect.andThen(
        Effect.sync(() => tools.push.script(f.registration, f.answer, f.count)),
        tools.note(f),
      )
    case "push-gone":
      return pushGone(tools, f)
    case "retention-gap":
      return retentionGap(tools, f)
  }
}

export const run = (context: Context, faults: ReadonlyArray<FaultSchedule.Fault>, startedAt: number) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const webhooks = yield* WebhookSubscriptions
    const later: Array<Fiber.Fiber<unknown, unknown>> = []
    const subscription = (name: string) => context.tenants.subscriptions.find((s) => s.plan.name === name)!
    const head = sql<{ value: bigint }>`SELECT value FROM event_seq`.pipe(Effect.map(([r]) => r!.value))
    const tools: Tools = {
      ...context,
      sql,
      webhooks,
      after: (millis, effect) =>
        Effect.forkChild(Effect.andThen(Effect.sleep(Duration.millis(millis)), effect)).pipe(
          Effect.tap((f) => Effect.sync(() => later.push(f))),
        ),
      note: (f, detail = FaultSchedule.describe(f)) =>
        Effect.sync(() => {
          context.history.injected.push({ kind: f.kind, at: Date.now(), detail })
        }),
      subscription,
      enableFromStart: (name) =>
        Effect.gen(function* () {
          const s = subscription(name)
          const fromSeq = s.startedSeq + 1n
          const top = yield* head
          const resumed = yield* webhooks.enable(s.id, fromSeq <= top ? { fromSeq } : {})
          if (resumed._tag === "Enabled")
            context.history.resumes.push({ subscription: name, after: resumed.after, at: Date.now() })
        }),
    }
    for (const f of faults) {
      const wait = startedAt + f.at - Date.now()
      if (wait > 0) yield* Effect.sleep(Duration.millis(wait))
      yield* perform(tools, f).pipe(
        Effect.catchCause((cause) =>
          Effect.sync(() =>
            context.history.failed.push({ kind: f.kind, detail: `${FaultSchedule.describe(f)}: ${String(cause)}` }),
          ),
        ),
      )
    }
    return {
      /** Waits for every delayed half (restarts, restores, re-enablings). */
      settled: Effect.gen(function* () {
        while (later.length > 0) yield* Fiber.join(later.shift()!).pipe(Effect.ignore)
      }),
    }
  })
