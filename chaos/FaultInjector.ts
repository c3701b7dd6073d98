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

export const run = (context: Context, faults: ReadonlyArray<FaultSchedule.Fault>, startedAt: number) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const webhooks = yield* WebhookSubscriptions
    const { history, workers, receiver, push, tenants } = context
    const later: Array<Fiber.Fiber<unknown, unknown>> = []
    const after = <A, E, R>(millis: number, effect: Effect.Effect<A, E, R>) =>
      Effect.forkChild(Effect.andThen(Effect.sleep(Duration.millis(millis)), effect)).pipe(
        Effect.tap((f) => Effect.sync(() => later.push(f))),
      )
    const note = (f: FaultSchedule.Fault, detail = FaultSchedule.describe(f)) =>
      Effect.sync(() => history.injected.push({ kind: f.kind, at: Date.now(), detail }))
    const subscription = (name: string) => tenants.subscriptions.find((s) => s.plan.name === name)!
    const head = sql<{ value: bigint }>`SELECT value FROM event_seq`.pipe(Effect.map(([r]) => r!.value))

    /** Enabled again from its first seq, so every event it matches gets exactly one delivery. */
    const enableFromStart = (name: string) =>
      Effect.gen(function* () {
        const s = subscription(name)
        const fromSeq = s.startedSeq + 1n
        const top = yield* head
        const resumed = yield* webhooks.enable(s.id, fromSeq <= top ? { fromSeq } : {})
        if (resumed._tag === "Enabled")
          history.resumes.push({ subscription: name, after: resumed.after, at: Date.now() })
      })

    const perform = (f: FaultSchedule.Fault): Effect.Effect<void, unknown, SqlClient.SqlClient> => {
      switch (f.kind) {
        case "sigkill":
        case "sigterm":
          return Effect.gen(function* () {
            yield* note(f)
            yield* workers.signal(f.worker, f.kind === "sigkill" ? "SIGKILL" : "SIGTERM")
            yield* after(f.restartAfter, workers.start(f.worker))
          })
        case "terminate-backends":
          return Effect.gen(function* () {
            const rows = yield* sql<{ pid: number }>`
              SELECT pid FROM pg_stat_activity
              WHERE datname = current_database() AND application_name LIKE 'bothy%' ORDER BY pid`
            const pids = [
              ...new Set(
                Array.from({ length: f.count }, (_, j) => rows[(f.pick + j * 7919) % Math.max(1, rows.length)]?.pid),
              ),
            ]
            for (const pid of pids) if (pid !== undefined) yield* sql`SELECT pg_terminate_backend(${pid})`
            yield* note(f, `${FaultSchedule.describe(f)}: pids ${pids.join(", ")} of ${rows.length}`)
          })
        case "pg-restart":
          return Effect.gen(function* () {
            yield* note(f)
            yield* context.server.restart(f.down)
          })
        case "revoke":
          return Effect.gen(function* () {
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
            history.grantWindows.push(window)
            yield* note(f)
            yield* after(
              f.restoreAfter,
              Effect.gen(function* () {
                window.restoreFrom = Date.now()
                yield* persist(PermissionGrants.grant(principal, action, space))
                window.restoreTo = Date.now()
              }),
            )
          })
        case "disable":
          return Effect.gen(function* () {
            yield* persist(webhooks.disable(subscription(f.subscription).id))
            yield* note(f)
            yield* after(f.enableAfter, persist(enableFromStart(f.subscription)))
          })
        case "webhook-answer":
          return Effect.andThen(
            Effect.sync(() => receiver.script(f.subscription, f.answer, f.count)),
            note(f),
          )
        case "webhook-gone":
          return Effect.gen(function* () {
            receiver.gone(f.subscription)
            yield* note(f)
            const id = subscription(f.subscription).id
            const gone = Effect.gen(function* () {
              const s = yield* webhooks.get(id)
              return s.state === "disabled" && s.disabledCause === "gone"
            })
            yield* after(
              0,
              Effect.gen(function* () {
                // Until its drainer has had the 410 (a subscription that hears of no event waits), for
                // at most the guard below: a 410 never acted on is reported, not waited for forever.
                const until = Date.now() + goneGuardMillis
                while (!(yield* persist(gone))) {
                  if (Date.now() > until) {
                    history.failed.push({
                      kind: f.kind,
                      detail: `${f.subscription} was not disabled gone within 5 minutes`,
                    })
                    return
                  }
                  yield* Effect.sleep("500 millis")
                }
                // The endpoint is back (its owner fixed it): enabled again from its first seq.
                receiver.back(f.subscription)
                yield* persist(enableFromStart(f.subscription))
              }),
            )
          })
        case "push-answer":
          return Effect.andThen(
            Effect.sync(() => push.script(f.registration, f.answer, f.count)),
            note(f),
          )
        case "push-gone":
          return Effect.gen(function* () {
            push.gone(f.registration)
            yield* note(f)
            const id = tenants.registrations.find((r) => r.name === f.registration)!.id
            const kept = sql`SELECT 1 FROM push_registrations WHERE id = ${id}::bigint`.pipe(
              Effect.map((rows) => rows.length > 0),
            )
            yield* after(
              0,
              Effect.gen(function* () {
                const until = Date.now() + goneGuardMillis
                while (yield* persist(kept)) {
                  if (Date.now() > until) {
                    history.failed.push({ kind: f.kind, detail: `${f.registration} was not removed within 5 minutes` })
                    return
                  }
                  yield* Effect.sleep("500 millis")
                }
                history.pushRemovedAt = Date.now()
              }),
            )
          })
        case "retention-gap":
          return Effect.gen(function* () {
            // A worker's own run may hold the retention lease: wait it out, the gap is this fault's point.
            const retention = yield* persist(
              Retention.run({ retention: Duration.days(7), dropPause: Duration.millis(20) }),
            ).pipe(Effect.repeat({ while: (r) => r.busy, schedule: Schedule.spaced("500 millis") }))
            history.gap = { at: Date.now(), cursors: context.stall.cursors, dropped: retention.dropped }
            yield* context.stall.release
            yield* note(f, `${FaultSchedule.describe(f)}: dropped ${retention.dropped.join(", ") || "nothing"}`)
          })
      }
    }

    for (const f of faults) {
      const wait = startedAt + f.at - Date.now()
      if (wait > 0) yield* Effect.sleep(Duration.millis(wait))
      yield* perform(f).pipe(
        Effect.catchCause((cause) =>
          Effect.sync(() =>
            history.failed.push({ kind: f.kind, detail: `${FaultSchedule.describe(f)}: ${String(cause)}` }),
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
