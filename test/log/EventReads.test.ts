import { assert, layer } from "@effect/vitest"
import { Effect, Ref } from "effect"
import { SqlClient } from "effect/sql"
import * as PermissionGrants from "../../src/authz/PermissionGrants.ts"
import { webhookDeliver } from "../../src/authz/Permissions.ts"
import * as Consumer from "../../src/consumer/Consumer.ts"
import type { LostRange } from "../../src/consumer/ConsumerRound.ts"
import * as StatementRound from "../../src/consumer/StatementRound.ts"
import * as EventLogPartitions from "../../src/log/EventLogPartitions.ts"
import * as Status from "../../src/ops/Status.ts"
import * as WebhookDrainer from "../../src/webhooks/drain/WebhookDrainer.ts"
import * as WebhookReceiver from "../../testkit/WebhookReceiver.ts"
import { appendAt, dayMillis, days } from "../support/OldEvents.ts"
import { explaining, planned, touched } from "../support/PlanCapture.ts"
import * as TestConsumer from "../support/TestConsumer.ts"
import * as TestWebhooks from "../support/TestWebhooks.ts"

const dayName = (t: number) => EventLogPartitions.dayName(new Date(t))

const logPartitions = (plan: unknown) => touched(plan).filter((name) => name.startsWith("event_log_"))
const logPlanned = (plan: unknown) => planned(plan).filter((name) => name.startsWith("event_log_"))

/** The day of a partition: itself, or the day an hour leaf (`event_log_YYYYMMDD_hHH`) belongs to. */
const dayOf = (partition: string) => partition.slice(0, "event_log_YYYYMMDD".length)

layer(TestWebhooks.layer(), { excludeTestServices: true })("Event reads", (it) => {
  it.effect(
    "EventReadsPrunePartitions: with 30 days of partitions, the consumer's batch read (one-statement and transactional rounds), the status's pending age and the drainer's event lookup scan (and set up) only the partitions (days, or hours of a split day) that can hold their rows",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const now = Date.now()
        yield* days(now - 30 * dayMillis, 30)
        const seqs = yield* appendAt(Array.from({ length: 30 }, (_, i) => now - (30 - i) * dayMillis))
        const partitions = yield* sql<{ n: number }>`
          SELECT count(*)::int AS n FROM pg_inherits WHERE inhparent = 'event_log'::regclass`
        assert.isAtLeast(partitions[0]!.n, 44, "30 days behind and 14 ahead")

        // A consumer whose cursor is at the event of three days ago.
        const name = "prune_test"
        yield* TestConsumer.register(name)
        const at = seqs[27]!
        yield* sql`
          UPDATE event_consumer_cursors SET last_seq = ${at}, last_at = (SELECT occurred_at FROM event_log WHERE seq = ${at})
          WHERE name = ${name}`
        // Its day (a later seq may share its time) through today.
        const canHold = [3, 2, 1, 0].map((d) => dayName(now - d * dayMillis))
        // Neither scanned nor even set up: the bounds prune when PostgreSQL plans (or starts) the read.
        const within = (plan: unknown) => logPlanned(plan).every((p) => canHold.includes(dayOf(p)))
        const shown = (plan: unknown) =>
          `${logPlanned(plan).length} set up: ${logPlanned(plan).slice(0, 4).join(", ")}...`

        const statement = yield* explaining(
          /FOR UPDATE SKIP LOCKED/,
          StatementRound.make({
            name,
            batchSize: 10,
            fanOut: { ctes: (s) => TestConsumer.wantedCte(s, 1) },
          }),
        )
        assert.strictEqual(statement.result?._tag, "Processed")
        assert.isNotEmpty(statement.plans)
        for (const plan of statement.plans) assert.isTrue(within(plan), shown(plan))
        assert.isNotEmpty(logPartitions(statement.plans[0]), "the read did scan the log")

        yield* sql`
          UPDATE event_consumer_cursors SET last_seq = ${at}, last_at = (SELECT occurred_at FROM event_log WHERE seq = ${at})
          WHERE name = ${name}`
        const transactional = yield* explaining(
          /FROM event_log\s+WHERE seq >/,
          Effect.flatMap(
            Consumer.makeRound({
              name,
              batchSize: 10,
              onLoss: () => Effect.void,
              fanOut: (events) => Effect.succeed(TestConsumer.fanOutJobs(events, 1)),
            }),
            (round) => round,
          ),
        )
        assert.strictEqual(transactional.result._tag, "Processed")
        assert.isNotEmpty(transactional.plans)
        for (const plan of transactional.plans) assert.isTrue(within(plan), shown(plan))

        // The status's pending age, with every consumer's cursor where this one's was.
        yield* sql`
          UPDATE event_consumer_cursors SET last_seq = ${at}, last_at = (SELECT occurred_at FROM event_log WHERE seq = ${at})`
        const status = yield* explaining(/FROM event_log/, Status.consumers(sql))
        assert.isTrue(status.result.every((c) => c.pendingAgeSeconds > 2 * 86_400))
        for (const plan of status.plans) assert.isTrue(within(plan), shown(plan))
        assert.strictEqual(status.plans.length, status.result.length, "a lookup per lagging consumer")

        // The drainer's lookup of a delivery's event: the one partition of its day.
        const receiver = yield* WebhookReceiver.start(() => ({ status: 200 }))
        yield* PermissionGrants.grant("owner-p", webhookDeliver, "today")
        const sub = yield* TestWebhooks.subscribe("owner-p", receiver.url("/p"), ["today"])
        yield* TestWebhooks.append("today")
        yield* TestWebhooks.round()
        const info = yield* TestWebhooks.drainJob(sub.id)
        const kind = yield* WebhookDrainer.makeWith({ linger: 0 })
        const drained = yield* explaining(
          /webhook_drains AS w/,
          Effect.ignore(kind.run({ subscription: sub.id }, info)),
        )
        const lookups = drained.plans.filter((p) => logPartitions(p).length > 0)
        assert.isNotEmpty(lookups, "the drainer looked its event up")
        // Its window, from the event's time to the database's clock and a minute: the hours of
        // today (and of tomorrow's first, a minute before midnight) are all it sets up.
        const windowDays = [dayName(now), dayName(now + dayMillis)]
        for (const plan of lookups) {
          assert.strictEqual(logPartitions(plan).length, 1, JSON.stringify(logPartitions(plan)))
          assert.deepStrictEqual(logPartitions(plan).map(dayOf), [dayName(now)])
          assert.isTrue(
            logPlanned(plan).every((p) => windowDays.includes(dayOf(p))),
            shown(plan),
          )
        }
      }).pipe(Effect.scoped),
  )

  it.effect(
    "EventReadsPrunePartitions: the one-statement round's generic plan (PostgreSQL's choice for the prepared round after five runs) locks only the leaves of its window's days, not every leaf of the 44 days",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const now = Date.now()
        yield* days(now - 30 * dayMillis, 30)
        yield* appendAt([now - dayMillis])
        const name = "generic_test"
        yield* TestConsumer.register(name)
        const [first] = yield* appendAt([now, now])
        yield* sql`
          UPDATE event_consumer_cursors SET last_seq = ${first!}, last_at = (SELECT occurred_at FROM event_log WHERE seq = ${first!})
          WHERE name = ${name}`
        const { outcome, locked } = yield* sql.withTransaction(
          Effect.gen(function* () {
            yield* sql`SET LOCAL plan_cache_mode = force_generic_plan`
            const outcome = yield* StatementRound.make({
              name,
              batchSize: 10,
              fanOut: { ctes: (s) => TestConsumer.wantedCte(s, 1) },
            })
            // A plan's locks on relations stay until the transaction ends.
            const locked = yield* sql<{ name: string }>`
              SELECT c.relname AS name FROM pg_locks AS l JOIN pg_class AS c ON c.oid = l.relation
              WHERE l.pid = pg_backend_pid() AND c.relkind IN ('r', 'p') AND c.relname LIKE 'event_log\\_%'`
            return { outcome, locked: locked.map((r) => r.name) }
          }),
        )
        assert.strictEqual(outcome?._tag, "Processed")
        // Today, and tomorrow when the window's minute past the clock reaches it.
        const windowDays = [dayName(now), dayName(now + dayMillis)]
        assert.isNotEmpty(locked)
        assert.isTrue(
          locked.every((p) => windowDays.includes(dayOf(p))),
          `${locked.length} locked: ${locked.slice(0, 4).join(", ")}...`,
        )
      }).pipe(Effect.scoped),
  )
})

// A database of its own: the events here are older than the ones the tests above append.
layer(TestWebhooks.layer(), { excludeTestServices: true })("Event reads of named days", (it) => {
  it.effect(
    "RoundOverAGoneDayReportsLoss: a one-statement round that names its window's days reads a detached day as empty and a dropped one as a failure, and either way hands over to the transactional round, which reports the loss",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const now = Date.now()
        yield* days(now - dayMillis, 1)
        const name = "gone_day"
        yield* TestConsumer.register(name)
        const [read] = yield* appendAt([now - dayMillis])
        yield* sql`
          UPDATE event_consumer_cursors SET last_seq = ${read!}, last_at = (SELECT occurred_at FROM event_log WHERE seq = ${read!})
          WHERE name = ${name}`
        const [lost, kept] = yield* appendAt([now - dayMillis + 1_000, now])
        const fanOut = { ctes: (s: SqlClient.SqlClient) => TestConsumer.wantedCte(s, 1) }
        const statement = StatementRound.make({ name, batchSize: 10, fanOut })
        const yesterday = sql(dayName(now - dayMillis))

        yield* sql`ALTER TABLE event_log DETACH PARTITION ${yesterday}`
        assert.strictEqual(yield* statement, undefined, "a detached day is read as empty: a hole")
        yield* sql`DROP TABLE ${yesterday}`
        assert.strictEqual(yield* statement, undefined, "a dropped day fails the read")
        assert.strictEqual(yield* TestConsumer.cursor(name), read!, "the cursor stayed")

        const losses = yield* Ref.make<Array<LostRange>>([])
        const round = yield* Consumer.makeRound({
          name,
          batchSize: 10,
          onLoss: (range) => Ref.update(losses, (l) => [...l, range]),
          fanOut: (events) => Effect.succeed(TestConsumer.fanOutJobs(events, 1)),
          oneStatement: (r) => StatementRound.make({ ...r, fanOut }),
        })
        assert.strictEqual((yield* round)._tag, "Processed")
        assert.deepStrictEqual(yield* Ref.get(losses), [{ firstSeq: lost!, lastSeq: lost! }])
        assert.strictEqual(yield* TestConsumer.cursor(name), kept!)
      }).pipe(Effect.scoped),
  )
})
