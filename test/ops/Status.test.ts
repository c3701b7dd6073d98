import { assert, layer } from "@effect/vitest"
import { Effect } from "effect"
import { SqlClient } from "effect/sql"
import * as WebhookSubscriptions from "../../src/webhooks/subscriptions/WebhookSubscriptions.ts"
import * as NodeProcess from "../support/NodeProcess.ts"
import { TestDatabase } from "../support/TestDatabase.ts"
import * as TestWebhooks from "../support/TestWebhooks.ts"

const Live = TestWebhooks.layer()

const status = (args: ReadonlyArray<string>) =>
  Effect.flatMap(TestDatabase, ({ url }) =>
    NodeProcess.run(NodeProcess.bothy, ["status", ...args], { DATABASE_URL: url }),
  )

interface StatusJson {
  consumers: Array<{ name: string; lastSeq: string; head: string; lag: number; pendingAgeSeconds: number }>
  jobs: Array<{ state: string; kind: string; count: number; oldestSeconds: number }>
  subscriptions: Array<{ state: string; cause: string | null; count: number }>
  oldestPendingDelivery: { subscription: string; eventSeq: string; ageSeconds: number } | null
  pushRegistrations: number | null
  partitions: { count: number; oldestDay: string | null; lastDay: string | null; daysAhead: number }
}

layer(Live, { excludeTestServices: true })("bothy status", (it) => {
  it.effect(
    "StatusShowsLagAndJobs: with no worker running, the table and --json show each consumer's lag and pending age, jobs by state and kind, subscriptions by state and cause, partitions",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const kept = yield* TestWebhooks.subscribe("status-owner", "http://127.0.0.1:9/kept", ["status-space"])
        const dropped = yield* TestWebhooks.subscribe("status-owner", "http://127.0.0.1:9/dropped", ["status-space"])
        yield* (yield* WebhookSubscriptions.WebhookSubscriptions).disable(dropped.id)
        // Three events the round turns into a drain job and pending deliveries, then two it has not read.
        for (const n of [1, 2, 3]) yield* TestWebhooks.append("status-space", { n })
        yield* TestWebhooks.round()
        for (const n of [4, 5]) yield* TestWebhooks.append("status-space", { n })
        const [cursor] = yield* sql<{ lastSeq: bigint }>`
          SELECT last_seq AS "lastSeq" FROM event_consumer_cursors WHERE name = 'webhooks'`
        const jobs = yield* sql<{ kind: string; state: string; n: number }>`
          SELECT kind, state::text AS state, count(*)::int AS n FROM jobs GROUP BY kind, state`
        assert.isNotEmpty(jobs, "the round made jobs")
        const [push] = yield* sql<{ present: boolean }>`SELECT to_regclass('push_registrations') IS NOT NULL AS present`

        const json = yield* status(["--json"])
        assert.strictEqual(json.code, 0, json.stderr)
        const got = JSON.parse(json.stdout) as StatusJson
        const webhooks = got.consumers.find((c) => c.name === "webhooks")!
        assert.strictEqual(webhooks.lastSeq, String(cursor!.lastSeq))
        assert.strictEqual(webhooks.lag, 2)
        assert.isAbove(webhooks.pendingAgeSeconds, 0)
        assert.deepStrictEqual(
          got.jobs.map((j) => [j.kind, j.state, j.count]).sort(),
          jobs.map((j) => [j.kind, j.state, j.n]).sort(),
        )
        assert.deepStrictEqual(
          got.subscriptions.map((s) => [s.state, s.cause, s.count]),
          [
            ["active", null, 1],
            ["disabled", "manual", 1],
          ],
        )
        assert.strictEqual(got.oldestPendingDelivery?.subscription, kept.id)
        assert.strictEqual(got.pushRegistrations === null, push?.present !== true)
        assert.isAtLeast(got.partitions.daysAhead, 13)
        // The database was made today, or yesterday when the run crossed midnight UTC.
        const day = (offset: number) => new Date(Date.now() - offset * 86_400_000).toISOString().slice(0, 10)
        assert.include([day(0), day(1)], got.partitions.oldestDay)

        const table = yield* status([])
        assert.strictEqual(table.code, 0, table.stderr)
        assert.match(table.stdout, new RegExp(`^\\s+webhooks\\s+${cursor!.lastSeq}\\s+2\\s+\\d+s$`, "m"))
        for (const j of jobs) assert.match(table.stdout, new RegExp(`^\\s+${j.kind}\\s+${j.state}\\s+${j.n}\\s`, "m"))
        assert.match(table.stdout, /^\s+active\s+-\s+1\s+0$/m)
        assert.match(table.stdout, /^\s+disabled\s+manual\s+1\s+0$/m)
        assert.include(table.stdout, `oldest pending delivery:`)
        assert.include(table.stdout, `(subscription ${kept.id}, event`)
        assert.match(table.stdout, /days kept, oldest \d{4}-\d{2}-\d{2}; \d+ days ahead/)
        assert.notMatch(table.stdout, /worker running|embedded PostgreSQL/, "no worker, no embedded server")
      }),
  )
})
