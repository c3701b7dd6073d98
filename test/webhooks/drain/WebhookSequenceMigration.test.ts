import { assert, layer } from "@effect/vitest"
import { Effect, Layer, Queue } from "effect"
import { Migrator, SqlClient } from "effect/sql"
import * as PermissionGrants from "../../../src/authz/PermissionGrants.ts"
import { webhookDeliver } from "../../../src/authz/Permissions.ts"
import * as SecretBox from "../../../src/crypto/SecretBox.ts"
import * as JobWorker from "../../../src/jobs/JobWorker.ts"
import { EventLog } from "../../../src/log/EventLog.ts"
import * as Migrations from "../../../src/platform/Migrations.ts"
import * as WebhookDrainer from "../../../src/webhooks/drain/WebhookDrainer.ts"
import * as WebhookSecret from "../../../src/webhooks/subscriptions/WebhookSecret.ts"
import { WebhookSubscriptions } from "../../../src/webhooks/subscriptions/WebhookSubscriptions.ts"
import { WebhookConfig } from "../../../src/webhooks/WebhookConfig.ts"
import * as WebhookReceiver from "../../../testkit/WebhookReceiver.ts"
import * as TestWebhooks from "../../support/TestWebhooks.ts"

const Live = TestWebhooks.layerEmpty()

/** The migrations before 0009, applied the way `Migrations.run` applies them all. */
const before0009 = Migrator.make({})({
  loader: Migrator.fromRecord(Object.fromEntries(Object.entries(Migrations.migrations).filter(([id]) => id < "0009"))),
  table: Migrations.migrationsTable,
})

layer(Live, { excludeTestServices: true })("Webhook sequence migration", (it) => {
  it.effect(
    "WebhookSequenceMigrationKeepsNumbers: deliveries the round numbered before 0009 keep their numbers, pending ones too, and the next number follows the highest",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        yield* before0009
        const receiver = yield* WebhookReceiver.start(() => ({ status: 200 }))
        // A subscription as the code before 0009 created it (today's `WebhookSubscriptions` needs
        // today's schema).
        const { secretKey } = yield* WebhookConfig
        const [sub] = yield* sql<{ id: string }>`
          INSERT INTO webhook_subscriptions (owner, url, secret_sealed, started_seq, last_delivered_seq)
          SELECT 'owner-m', ${receiver.url("/mig")}, ${SecretBox.seal(secretKey, WebhookSecret.generate())}, value, value
          FROM event_seq RETURNING id::text`
        yield* sql`INSERT INTO webhook_subscription_spaces (space_id, subscription_id) VALUES ('mig', ${sub!.id}::uuid)`
        yield* PermissionGrants.grant("owner-m", webhookDeliver, "mig")
        // Appended as the code before 0009 did (today's `EventLog` needs today's schema).
        const [{ lastSeq }] = (yield* sql<{ lastSeq: bigint }>`
          WITH head AS (
            UPDATE event_seq SET value = value + 5 RETURNING value - 5 AS base, epoch, clock_timestamp() AS at
          ), ins AS (
            INSERT INTO event_log (seq, epoch, occurred_at, space_id, type, actor, payload)
            SELECT head.base + n, head.epoch, head.at, 'mig', 'item.created', 'tester', jsonb_build_object('n', n - 1)
            FROM head, generate_series(1, 5) AS n
          )
          SELECT base + 5 AS "lastSeq" FROM head`) as [{ lastSeq: bigint }]
        // As the round left things before 0009: numbered 1..5 on creation, three of them delivered.
        yield* sql`INSERT INTO webhook_drains (subscription_id, sequence) VALUES (${sub!.id}::uuid, 5)`
        yield* sql`
          INSERT INTO webhook_deliveries (subscription_id, event_seq, epoch, sequence, state, attempts)
          SELECT ${sub!.id}::uuid, ${lastSeq} - 5 + n, 1, n, CASE WHEN n <= 3 THEN 'delivered' ELSE 'pending' END,
                 CASE WHEN n <= 3 THEN 1 ELSE 0 END
          FROM generate_series(1, 5) AS n`
        yield* sql`UPDATE webhook_subscriptions SET last_delivered_seq = ${lastSeq} - 2 WHERE id = ${sub!.id}::uuid`
        yield* sql`UPDATE event_consumer_cursors SET last_seq = ${lastSeq} WHERE name = 'webhooks'`

        assert.deepStrictEqual(
          (yield* Migrations.run).map(([id]) => id),
          Object.keys(Migrations.migrations)
            .map((id) => Number(id.slice(0, 4)))
            .filter((id) => id >= 9),
        )
        const webhooks = yield* Effect.provide(
          Effect.gen(function* () {
            return yield* WebhookSubscriptions
          }),
          WebhookSubscriptions.layer,
        )
        assert.strictEqual((yield* webhooks.get(sub!.id)).lastSequence, 5n, "the counter starts at the highest")
        const columns = yield* sql<{ name: string }>`
          SELECT column_name AS name FROM information_schema.columns WHERE table_name = 'webhook_drains'`
        assert.notInclude(
          columns.map((c) => c.name),
          "sequence",
          "the drain row no longer numbers anything",
        )

        // A new event; the pending ones go out under their old numbers, the new one under the next.
        yield* (yield* EventLog).append([{ space: "mig", type: "item.created", actor: "tester", payload: { n: 5 } }])
        yield* TestWebhooks.round()
        const kind = yield* WebhookDrainer.make
        yield* Layer.build(JobWorker.layer({ kinds: [kind], queues: { webhooks: { concurrency: 2 } } }))
        const got = yield* Effect.forEach([0, 1, 2], () => Queue.take(receiver.received)).pipe(
          Effect.timeout("20 seconds"),
        )
        assert.deepStrictEqual(
          got
            .map((r) => JSON.parse(r.body) as { sequence: number; data: { n: number } })
            .map((e) => [e.data.n, e.sequence]),
          [
            [3, 4],
            [4, 5],
            [5, 6],
          ],
        )
      }).pipe(Effect.scoped),
    60_000,
  )
})
