/**
 * The first execution of a push delivery's read, on a cold connection after an idle minute, must
 * cost what the hundredth does: PostgreSQL plans each of the first executions afresh (custom plans)
 * and, before the event's time went in as bounds, set up every hour leaf of the log for each (164
 * to 267 ms over 338 leaves, measured from outside). The webhook drainer's read is held to the same
 * by `EventReadsPrunePartitions` (its time window).
 *
 * And the hundredth must not be planned at all: the read names its event's leaf, so PostgreSQL
 * keeps one generic plan, and it still finds the event wherever the log keeps it (an hour leaf, a
 * day created whole) and not once the log no longer does (detached, dropped).
 */
import { assert, layer } from "@effect/vitest"
import { Effect } from "effect"
import { SqlClient } from "effect/sql"
import { Permissions, pushDeliver } from "../../src/authz/Permissions.ts"
import * as EventLogLeaf from "../../src/log/EventLogLeaf.ts"
import * as EventLogPartitions from "../../src/log/EventLogPartitions.ts"
import { readTargets } from "../../src/push/PushTargets.ts"
import { appendAt, dayMillis, days } from "../support/OldEvents.ts"
import { explaining, planned } from "../support/PlanCapture.ts"
import * as TestPush from "../support/TestPush.ts"

/** The relations `plan` reads whole (a sequential scan that ran). */
const seqScanned = (plan: unknown): ReadonlyArray<string> => {
  if (Array.isArray(plan)) return plan.flatMap(seqScanned)
  if (typeof plan !== "object" || plan === null) return []
  const node = plan as Record<string, unknown>
  const own =
    node["Node Type"] === "Seq Scan" && Number(node["Actual Loops"] ?? 0) > 0 ? [String(node["Relation Name"])] : []
  return [...own, ...Object.values(node).flatMap((v) => (typeof v === "object" ? seqScanned(v) : []))]
}

const logPlanned = (plan: unknown) => planned(plan).filter((name) => name.startsWith("event_log_"))

/**
 * Leaves pruned only when the executor started (`Subplans Removed`): the planner had set each of
 * them up first. Pruned while planning, they never show.
 */
const removedAtStart = (plan: unknown): number => {
  if (Array.isArray(plan)) return plan.reduce((n: number, p) => n + removedAtStart(p), 0)
  if (typeof plan !== "object" || plan === null) return 0
  const node = plan as Record<string, unknown>
  return Object.entries(node).reduce(
    (n, [key, value]) => n + (key === "Subplans Removed" ? Number(value) : removedAtStart(value)),
    0,
  )
}

layer(TestPush.layer(), { excludeTestServices: true })("the push delivery's read", (it) => {
  it.effect(
    "FirstRoundAfterIdleIsFast: with 44 days of leaves, the push read's first (custom) plan sets up only the event's hour leaf",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const permissions = yield* Permissions
        const now = Date.now()
        yield* days(now - 30 * dayMillis, 30)
        const [seq] = yield* appendAt([now - 3 * dayMillis])
        const leaves = yield* sql<{ n: number }>`
          SELECT count(*)::int AS n FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid
          WHERE c.relname LIKE 'event_log\\_%\\_h%'`
        assert.isAtLeast(leaves[0]!.n, 44 * 24 - 48, "hour leaves of 44 days (the oldest days may be whole)")
        // The job's `at` as the fan-out writes it: the event's time as jsonb text (microseconds).
        const [event] = yield* sql<{ at: string; occurredAt: Date }>`
          SELECT to_jsonb(occurred_at) #>> '{}' AS at, occurred_at AS "occurredAt" FROM event_log WHERE seq = ${seq!}`

        const { result, plans } = yield* explaining(
          /AS seq\) AS k LEFT JOIN/,
          readTargets(sql, permissions, new EventLogLeaf.Leaves(), {
            registrations: ["1"],
            seq: String(seq),
            at: event!.at,
          }),
        )
        assert.strictEqual(result.event?.occurredAt.getTime(), event!.occurredAt.getTime(), "the event is found")
        assert.strictEqual(plans.length, 1)
        assert.strictEqual(removedAtStart(plans[0]), 0, "no leaf was set up only to be pruned at the start")
        const hour = EventLogPartitions.dayName(event!.occurredAt)
        assert.deepStrictEqual(
          logPlanned(plans[0]).map((name) => name.startsWith(hour)),
          [true],
          `set up: ${logPlanned(plans[0]).slice(0, 4).join(", ")} (${logPlanned(plans[0]).length} in all)`,
        )
      }),
  )
  it.effect(
    "PushReadProbesByIndex: a batch of 100 out of 3,000 registrations, each of its own principal, reads its registrations and their rights by index, not by scanning both tables for every batch",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const permissions = yield* Permissions
        yield* sql`
          INSERT INTO push_registrations (principal, endpoint, p256dh, auth)
          SELECT 'm' || i, 'https://push.example/' || i, 'p', 'a' FROM generate_series(1, 3000) AS i`
        yield* sql`
          INSERT INTO permission_grants (principal, action, space_id)
          SELECT 'm' || i, ${pushDeliver}, 'big' FROM generate_series(1, 3000) AS i`
        yield* sql`ANALYZE push_registrations, permission_grants`
        const [seq] = yield* appendAt([Date.now()])
        const ids = yield* sql<{
          id: string
        }>`SELECT id::text AS id FROM push_registrations ORDER BY id LIMIT 100 OFFSET 1000`
        const { result, plans } = yield* explaining(
          /AS seq\) AS k LEFT JOIN/,
          readTargets(sql, permissions, new EventLogLeaf.Leaves(), {
            registrations: ids.map((r) => r.id),
            seq: String(seq),
          }),
        )
        assert.strictEqual(result.targets.length, 100)
        assert.deepStrictEqual(
          seqScanned(plans[0]).filter((name) => !name.startsWith("event_log")),
          [],
          "no table read whole",
        )
      }),
  )
  it.effect(
    "PushReadPlannedOnce: a batch of three read again and again on one connection keeps one generic plan, and finds its event in an hour leaf, in a day created whole, and not once its day is detached or dropped",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const permissions = yield* Permissions
        const now = Date.now()
        yield* days(now - 5 * dayMillis, 3)
        const [split] = yield* appendAt([now - 4 * dayMillis])
        // The job's `at` as the fan-out writes it: the event's time as jsonb text (microseconds).
        const jobAt = (seq: bigint) =>
          Effect.map(
            sql<{ at: string }>`SELECT to_jsonb(occurred_at) #>> '{}' AS at FROM event_log WHERE seq = ${seq}`,
            (rows) => rows[0]!.at,
          )
        const at = yield* jobAt(split!)
        const leaves = new EventLogLeaf.Leaves()
        const read = (seq: bigint, when: string) =>
          readTargets(sql, permissions, leaves, { registrations: ["1", "2", "3"], seq: String(seq), at: when }).pipe(
            Effect.map((r) => r.event?.space),
          )
        const day = EventLogPartitions.dayName(new Date(at))

        const plans = yield* sql.withTransaction(
          Effect.gen(function* () {
            for (let i = 0; i < 12; i++) assert.strictEqual(yield* read(split!, at), "old")
            return yield* sql<{ generic: number; custom: number }>`
              SELECT generic_plans::int AS generic, custom_plans::int AS custom FROM pg_prepared_statements
              WHERE statement LIKE ${`%FROM "${EventLogPartitions.leafName(new Date(at), "hours")}"%`}`
          }),
        )
        assert.deepStrictEqual(plans, [{ generic: 7, custom: 5 }], "five custom plans, then the generic one kept")
        assert.strictEqual(leaves.forms.get(day), undefined, "read from its hour leaf, as first guessed")

        // Today's day, made whole when this database was first migrated (before hour leaves).
        const whole = yield* sql<{ n: number }>`
          SELECT count(*)::int AS n FROM pg_inherits WHERE inhparent = ${EventLogPartitions.dayName(new Date(now))}::regclass`
        assert.deepStrictEqual(whole, [{ n: 0 }], "today's day has no leaves of its own")
        const [today] = yield* appendAt([now])
        assert.strictEqual(yield* read(today!, yield* jobAt(today!)), "old")
        assert.strictEqual(leaves.forms.get(EventLogPartitions.dayName(new Date(now))), "whole")

        yield* sql.unsafe(`ALTER TABLE event_log DETACH PARTITION ${day}`)
        assert.strictEqual(yield* read(split!, at), undefined, "detached: gone from the log")
        yield* sql.unsafe(`DROP TABLE ${day}`)
        assert.strictEqual(yield* read(split!, at), undefined, "dropped: gone from the log")
        assert.strictEqual(leaves.forms.get(day), "log")
      }),
  )
})
