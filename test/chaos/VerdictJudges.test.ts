/**
 * The negative control of each judge of the chaos verdict: a small run written into a fresh
 * database as bothy and the receivers would leave it after a clean drain (a gap subscription
 * disabled by the retention that took two old events, one subscription with its numbered delivery
 * rows, a push registration with its finished jobs, a doomed one removed after its 410, cursors at
 * the head), which every judge passes; then the fault a judge looks for is planted, in the database
 * where the judge reads it there (a row deleted, a job doubled, a cursor set back) or in the
 * harness's record where it reads that (arrivals swapped, a worker that exited), and that judge,
 * and with it the verdict, counts it.
 */
import { assert, describe, it } from "@effect/vitest"
import { Duration, Effect, Layer } from "effect"
import { SqlClient } from "effect/sql"
import * as History from "../../chaos/History.ts"
import * as OldEvents from "../../chaos/OldEvents.ts"
import * as PushJobAudit from "../../chaos/PushJobAudit.ts"
import type * as Receiver from "../../chaos/Receiver.ts"
import type * as Tenants from "../../chaos/Tenants.ts"
import * as Verdict from "../../chaos/Verdict.ts"
import * as Ledger from "../../chaos/verdict/Ledger.ts"
import * as Recorded from "../../chaos/verdict/Recorded.ts"
import * as Tally from "../../chaos/verdict/Tally.ts"
import * as World from "../../chaos/World.ts"
import { EventLog } from "../../src/log/EventLog.ts"
import * as Retention from "../../src/log/Retention.ts"
import * as TestDatabase from "../support/TestDatabase.ts"

const Live = EventLog.layer.pipe(Layer.provideMerge(TestDatabase.layer()))

const w0: World.SubscriptionPlan = { name: "w0", owner: "owner-0", scope: ["s00"], eventTypes: [], gap: false }
const gap0: World.SubscriptionPlan = {
  name: "gap0",
  owner: "owner-1",
  scope: ["old", "s00"],
  eventTypes: [],
  gap: true,
}
const principal: World.PrincipalPlan = {
  principal: "user-0",
  spaces: ["s00"],
  mutes: [],
  registrations: ["u0r0", "u0r1"],
}
const world = { principals: [principal], doomed: "u0r1" }
const pathOf = (name: string) => `/hook/${name}`

/** Six events over two spaces, one by the push principal itself (its audience leaves it out). */
const produced = Array.from({ length: 6 }, (_, i) => ({
  space: i % 3 === 2 ? "s01" : "s00",
  type: "item.created",
  actor: i === 1 ? principal.principal : "actor-0",
  payload: { key: `k${i}` },
}))

const head = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  Effect.map(sql<{ value: bigint }>`SELECT value FROM event_seq`, ([r]) => r!.value),
)

const subscription = (plan: World.SubscriptionPlan, startedSeq: bigint) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<{ id: string }>`
        INSERT INTO webhook_subscriptions (owner, url, secret_sealed, started_seq, last_delivered_seq)
        VALUES (${plan.owner}, ${`http://127.0.0.1:9${pathOf(plan.name)}`}, 'sealed', ${startedSeq}, ${startedSeq})
        RETURNING id::text`,
      ([r]): Tenants.Subscription => ({ plan, id: r!.id, startedSeq }),
    ),
  )

const registration = (name: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<{ id: string }>`
        INSERT INTO push_registrations (principal, endpoint, p256dh, auth)
        VALUES (${principal.principal}, ${`https://push.example/${name}`}, 'key', 'auth') RETURNING id::text`,
      ([r]): Tenants.Registration => ({ name, principal: principal.principal, id: r!.id }),
    ),
  )

/** The gap: two old events, a subscription begun before them, retention taking them, bothy disabling it. */
const gap = (history: History.History) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const gapSubscription = yield* subscription(gap0, 0n)
    const now = Date.now()
    const oldSeqs = yield* OldEvents.append([now - 11 * OldEvents.dayMillis, now - 10 * OldEvents.dayMillis], "old")
    const retention = yield* Retention.run({ retention: Duration.days(7), dropPause: Duration.zero })
    yield* sql`
      UPDATE webhook_subscriptions SET state = 'disabled', disabled_cause = 'gap', disabled_at = now()
      WHERE id = ${gapSubscription.id}::uuid`
    history.gap = {
      at: Date.now(),
      cursors: [
        { name: "webhooks", lastSeq: 0n },
        { name: "push", lastSeq: 0n },
      ],
      dropped: retention.dropped,
    }
    return { gapSubscription, oldSeqs }
  })

/**
 * A push job as the consumer's round makes it (a unique key; `tag` tells a second one apart) for
 * one registration, finished as bothy leaves it: nothing left in its registrations.
 */
const finishedPushJob = (registration: string, seq: string, tag: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.gen(function* () {
      const [job] = yield* sql<{ id: string }>`
        INSERT INTO jobs (kind, args, state, attempt, unique_key)
        VALUES ('push.batch', ${JSON.stringify({ seq, registrations: [registration] })}::jsonb, 'running', 1,
                ${`push/${seq}/${registration}/${tag}`})
        RETURNING id::text`
      yield* sql`
        UPDATE jobs SET state = 'completed', finalized_at = now(), args = ${JSON.stringify({ seq, registrations: [] })}::jsonb
        WHERE id = ${job!.id}::bigint`
    }),
  )

/** A run that drained cleanly, written as bothy leaves the database and the receivers their records. */
const cleanRun = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* PushJobAudit.install
  const history = History.empty()
  const { gapSubscription, oldSeqs } = yield* gap(history)
  const sub = yield* subscription(w0, yield* head)
  yield* Effect.flatMap(EventLog, (log) => log.append(produced))
  const events = yield* sql<{ seq: bigint; epoch: number; key: string; space: string; actor: string }>`
    SELECT seq, epoch, payload ->> 'key' AS key, space_id AS space, actor FROM event_log
    WHERE payload ? 'key' ORDER BY seq`
  const t0 = Date.now()
  const arrivals: Array<Receiver.Arrival> = []
  for (const [i, e] of events.filter((e) => e.space === "s00").entries()) {
    yield* sql`
      INSERT INTO webhook_deliveries (subscription_id, event_seq, epoch, sequence, state, attempts, last_status, finished_at)
      VALUES (${sub.id}::uuid, ${e.seq}, ${e.epoch}, ${i + 1}, 'delivered', 1, 200, now())`
    const at = t0 + i
    arrivals.push({
      path: pathOf("w0"),
      webhookId: `msg_${e.seq}`,
      key: e.key,
      sequence: i + 1,
      epoch: e.epoch,
      status: 200,
      verified: true,
      at,
    })
  }
  const kept = yield* registration("u0r0")
  const doomed = yield* registration("u0r1")
  const heard = events.filter((e) => e.space === "s00" && e.actor !== principal.principal)
  const pushArrivals = heard.map((e, i) => ({
    registration: kept.name,
    id: `${e.epoch}.${e.seq}`,
    space: e.space,
    status: 201,
    at: t0 + i,
  }))
  for (const e of heard) yield* finishedPushJob(kept.id, String(e.seq), "round")
  // The doomed registration: its first message answered 410, and bothy removed it.
  pushArrivals.push({ registration: doomed.name, id: pushArrivals[0]!.id, space: "s00", status: 410, at: t0 })
  yield* sql`DELETE FROM push_registrations WHERE id = ${doomed.id}::bigint`
  history.pushRemovedAt = t0 + 1
  const top = yield* head
  yield* sql`
    INSERT INTO event_consumer_cursors (name, last_seq) VALUES ('webhooks', ${top}), ('push', ${top})
    ON CONFLICT (name) DO UPDATE SET last_seq = excluded.last_seq`
  const run: Verdict.Run = {
    world,
    tenants: { subscriptions: [gapSubscription, sub], registrations: [kept, doomed], oldSeqs },
    produced: {
      committed: new Set(produced.map((e) => e.payload.key)),
      rolledBack: new Set(["rolled-back-0"]),
      inDoubt: new Set(),
      failures: 0,
      transactions: 2,
    },
    receiver: { arrivals, pathOf },
    push: { arrivals: pushArrivals, rejections: [] },
    history,
    unexpectedExits: 0,
    startFailures: 0,
    startFailuresUnexplained: 0,
  }
  return { run, sub, kept, doomed, events, t0 }
})

interface Judge {
  readonly family: ReadonlyArray<keyof Verdict.Zeros>
  readonly judge: (ledger: Ledger.Ledger) => Tally.Tally
}

/** The judge's counts, by name, and the verdict, from what the database holds now. */
const judged = (judge: Judge, run: Verdict.Run) =>
  Effect.gen(function* () {
    const ledger = Ledger.make(run, yield* Recorded.load)
    const tally = judge.judge(ledger)
    const counts = Object.fromEntries(judge.family.map((name) => [name, Tally.count(tally, name)]))
    return { counts, tally, verdict: Verdict.of(ledger) }
  })

/** The clean run passes the judge and the verdict; after `plant`, the judge counts `expected`. */
const control = (
  judge: Judge,
  plant: (
    fixture: Effect.Success<typeof cleanRun>,
  ) => Effect.Effect<Verdict.Run, unknown, SqlClient.SqlClient | EventLog>,
  expected: Partial<Record<keyof Verdict.Zeros, number>>,
) =>
  Effect.gen(function* () {
    const fixture = yield* cleanRun
    const before = yield* judged(judge, fixture.run)
    assert.deepStrictEqual(Verdict.failing(before.verdict), [], JSON.stringify(before.verdict.examples))
    assert.deepStrictEqual(before.counts, Object.fromEntries(judge.family.map((name) => [name, 0])))
    assert.strictEqual(before.verdict.figures.events, produced.length)
    const after = yield* judged(judge, yield* plant(fixture))
    assert.deepStrictEqual(after.counts, { ...before.counts, ...expected }, JSON.stringify(after.tally.examples))
    assert.includeMembers([...Verdict.failing(after.verdict)], Object.keys(expected))
  }).pipe(Effect.provide(Live))

const judgeOf = (name: string) => Verdict.judges.find((j) => j.family.some((f) => f === name))!

describe("chaos verdict, each judge against its planted fault", () => {
  it("VerdictFamiliesCoverEveryZero: every count that must be zero belongs to exactly one judge", () => {
    const families = Verdict.judges.flatMap((j) => [...j.family])
    const zeros: Record<keyof Verdict.Zeros, true> = {
      duplicates_created: true,
      lost: true,
      order_violations: true,
      sequence_gaps: true,
      denied_but_delivered: true,
      wrongly_denied: true,
      jobs_left_running: true,
      deliveries_left_pending: true,
      cursors_behind_head: true,
      log_holes: true,
      committed_missing_from_log: true,
      rolled_back_in_log: true,
      gaps_unreported: true,
      unverified_requests: true,
      undecryptable_pushes: true,
      doubled_effects: true,
      sent_after_gone: true,
      workers_exited_unasked: true,
      worker_start_failures_unexplained: true,
      faults_not_carried_out: true,
    }
    assert.sameMembers(families, Object.keys(zeros))
    assert.strictEqual(new Set(families).size, families.length)
  })

  it.live(
    "VerdictCountsLogFaults: an event deleted from the log is a hole and a committed key missing; a rolled-back key appended is counted",
    () =>
      control(
        judgeOf("log_holes"),
        ({ run, events }) =>
          Effect.gen(function* () {
            const sql = yield* SqlClient.SqlClient
            yield* sql`DELETE FROM event_log WHERE seq = ${events[3]!.seq}`
            yield* Effect.flatMap(EventLog, (log) =>
              log.append([{ space: "s01", type: "item.created", actor: "actor-0", payload: { key: "rolled-back-0" } }]),
            )
            return run
          }),
        { log_holes: 1, committed_missing_from_log: 1, rolled_back_in_log: 1 },
      ),
  )

  it.live("VerdictCountsUnreportedGap: a subscription begun before the gap left active is counted", () =>
    control(
      judgeOf("gaps_unreported"),
      ({ run }) =>
        Effect.gen(function* () {
          const sql = yield* SqlClient.SqlClient
          yield* sql`
            UPDATE webhook_subscriptions SET state = 'active', disabled_cause = NULL, disabled_at = NULL
            WHERE disabled_cause = 'gap'`
          return run
        }),
      { gaps_unreported: 1 },
    ),
  )

  it.live(
    "VerdictCountsDuplicates: a second push job for one (event, registration) and an event accepted under a second webhook-id are counted",
    () =>
      control(
        judgeOf("duplicates_created"),
        ({ run, kept, events }) =>
          Effect.gen(function* () {
            const seq = String(events.find((e) => e.space === "s00" && e.actor !== principal.principal)!.seq)
            yield* finishedPushJob(kept.id, seq, "again")
            const first = run.receiver.arrivals[0]!
            const again = { ...first, webhookId: `${first.webhookId}-again`, at: first.at + 100 }
            return { ...run, receiver: { ...run.receiver, arrivals: [...run.receiver.arrivals, again] } }
          }),
        { duplicates_created: 1, doubled_effects: 1 },
      ),
  )

  it("VerdictReadsDenialsOfRetriedBatches: a registration denied in an attempt whose batch then retried others and completed is denied, not lost", () => {
    const retried = {
      state: "completed",
      errors: [
        {
          attempt: 1,
          error:
            "1 of 2 registrations to retry: registration 5: push service answered 500; 1 of 2 registrations dead: registration 4: user-2 lacks push.deliver on space s12",
        },
      ],
    }
    assert.isTrue(Ledger.deniedIn(retried, "4"))
    assert.isFalse(Ledger.deniedIn(retried, "5"), "the one retried was not denied")
    assert.isFalse(Ledger.deniedIn(retried, "14"))
    assert.isFalse(Ledger.deniedIn({ state: "completed", errors: [] }, "4"))
    const cancelled = {
      state: "cancelled",
      errors: [{ attempt: 1, error: "1 of 1 registrations dead: user-2 lacks push.deliver" }],
    }
    assert.isTrue(Ledger.deniedIn(cancelled, "4"), "a cancelled job's reason that names none covers its batch")
  })

  it.live("VerdictCountsLosses: an event a subscription matches with its delivery row deleted is lost", () =>
    control(
      judgeOf("lost"),
      ({ run, sub, events }) =>
        Effect.gen(function* () {
          const sql = yield* SqlClient.SqlClient
          const seq = events.find((e) => e.space === "s00")!.seq
          yield* sql`DELETE FROM webhook_deliveries WHERE subscription_id = ${sub.id}::uuid AND event_seq = ${seq}`
          return run
        }),
      { lost: 1 },
    ),
  )

  it.live(
    "VerdictCountsOrderFaults: two first arrivals swapped are an order violation; a sequence number skipped is a gap",
    () =>
      control(
        judgeOf("order_violations"),
        ({ run }) =>
          Effect.sync(() => {
            const [a, b, ...rest] = run.receiver.arrivals
            const last = rest.at(-1)!
            const skipped = [...rest.slice(0, -1), { ...last, sequence: last.sequence + 1 }]
            return { ...run, receiver: { ...run.receiver, arrivals: [b!, a!, ...skipped] } }
          }),
        { order_violations: 1, sequence_gaps: 1 },
      ),
  )

  it.live(
    "VerdictCountsPermissionFaults: pushes inside a revoke window, a delivery denied with no revoke near, and a registration kept after its 410 are counted",
    () =>
      control(
        judgeOf("wrongly_denied"),
        ({ run, sub, doomed, events, t0 }) =>
          Effect.gen(function* () {
            const sql = yield* SqlClient.SqlClient
            const seq = events.find((e) => e.space === "s00")!.seq
            yield* sql`
              UPDATE webhook_deliveries SET state = 'dead', dead_reason = 'permission'
              WHERE subscription_id = ${sub.id}::uuid AND event_seq = ${seq}`
            yield* sql`
              INSERT INTO push_registrations (id, principal, endpoint, p256dh, auth) OVERRIDING SYSTEM VALUE
              VALUES (${doomed.id}::bigint, ${principal.principal}, 'https://push.example/u0r1', 'key', 'auth')`
            // Revoked for good a minute before any push arrived: all of them arrived while surely revoked.
            const window = {
              grant: { principal: principal.principal, action: World.pushAction, space: "s00" },
              revokeFrom: t0 - 60_000,
              revokeTo: t0 - 59_000,
              restoreFrom: Number.POSITIVE_INFINITY,
              restoreTo: Number.POSITIVE_INFINITY,
            }
            return { ...run, history: { ...run.history, grantWindows: [...run.history.grantWindows, window] } }
          }),
        // The three messages u0r0 accepted and the 410 to u0r1.
        { denied_but_delivered: 4, wrongly_denied: 1, sent_after_gone: 1 },
      ),
  )

  it.live(
    "VerdictCountsUnsettled: a job left running, a delivery left pending and a cursor behind the head are counted",
    () =>
      control(
        judgeOf("jobs_left_running"),
        ({ run, sub, events }) =>
          Effect.gen(function* () {
            const sql = yield* SqlClient.SqlClient
            yield* sql`
              UPDATE jobs SET state = 'running', finalized_at = NULL, attempted_by = 'worker-0'
              WHERE id = (SELECT min(id) FROM jobs WHERE kind = 'push.batch')`
            const seq = events.find((e) => e.space === "s00")!.seq
            yield* sql`
              UPDATE webhook_deliveries SET state = 'pending', finished_at = NULL
              WHERE subscription_id = ${sub.id}::uuid AND event_seq = ${seq}`
            yield* sql`UPDATE event_consumer_cursors SET last_seq = last_seq - 1 WHERE name = 'push'`
            return run
          }),
        { jobs_left_running: 1, deliveries_left_pending: 1, cursors_behind_head: 1 },
      ),
  )

  it.live(
    "VerdictCountsRejections: a request that failed verification and a push that failed to decrypt are counted",
    () =>
      control(
        judgeOf("unverified_requests"),
        ({ run }) =>
          Effect.sync(() => {
            const forged = { ...run.receiver.arrivals[0]!, webhookId: "msg_forged", verified: false, status: 400 }
            const rejection = { registration: "u0r0", reason: "bad VAPID token", at: Date.now() }
            return {
              ...run,
              receiver: { ...run.receiver, arrivals: [...run.receiver.arrivals, forged] },
              push: { ...run.push, rejections: [rejection] },
            }
          }),
        { unverified_requests: 1, undecryptable_pushes: 1 },
      ),
  )

  it.live(
    "VerdictCountsHarnessFailures: a worker that exited unasked, a start failure no fault explains and a fault not carried out are counted",
    () =>
      control(
        judgeOf("faults_not_carried_out"),
        ({ run }) =>
          Effect.sync(() => {
            const failed = [
              ...run.history.failed,
              { kind: "pg-restart" as const, detail: "PostgreSQL did not come back" },
            ]
            return {
              ...run,
              history: { ...run.history, failed },
              unexpectedExits: 1,
              startFailures: 1,
              startFailuresUnexplained: 1,
            }
          }),
        { workers_exited_unasked: 1, worker_start_failures_unexplained: 1, faults_not_carried_out: 1 },
      ),
  )
})
