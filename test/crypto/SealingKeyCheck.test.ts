import { randomBytes } from "node:crypto"
import { PgClient } from "@effect/sql-pg"
import { assert, layer } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber, Layer, Redacted } from "effect"
import { SqlClient } from "effect/sql"
import { SealingKeyMismatch, verify } from "../../src/crypto/SealingKeyCheck.ts"
import * as SecretBox from "../../src/crypto/SecretBox.ts"
import { EventLog } from "../../src/log/EventLog.ts"
import { WebhookSubscriptions } from "../../src/webhooks/subscriptions/WebhookSubscriptions.ts"
import { WebhookConfig } from "../../src/webhooks/WebhookConfig.ts"
import * as TestDatabase from "../support/TestDatabase.ts"

const newKey = () => SecretBox.parseKey(Redacted.make(randomBytes(32).toString("base64")))

/** The file's tests share one database: each starts from a database that has no key yet. */
const forget = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  Effect.andThen(sql`DELETE FROM webhook_subscriptions`, sql`DELETE FROM webhook_sealing_key`),
)

const recorded = Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => sql<{ keyId: string }>`SELECT key_id AS "keyId" FROM webhook_sealing_key`,
)

const refusal = (exit: Exit.Exit<unknown, unknown>) => {
  assert.isTrue(Exit.isFailure(exit))
  const error = Exit.isFailure(exit) ? exit.cause.reasons.find((r) => r._tag === "Fail")?.error : undefined
  assert.instanceOf(error, SealingKeyMismatch)
  return error as SealingKeyMismatch
}

/** `n` pools of their own on the test database, each with its connection open already. */
const pools = (n: number) =>
  Effect.flatMap(TestDatabase.TestDatabase, ({ url }) =>
    Effect.forEach(Array.from({ length: n }), () =>
      Effect.gen(function* () {
        const context = yield* Layer.build(PgClient.layer({ url: Redacted.make(url), maxConnections: 1 }))
        yield* Effect.flatMap(SqlClient.SqlClient, (sql) => sql`SELECT 1`).pipe(Effect.provideContext(context))
        return context
      }),
    ),
  )

layer(TestDatabase.layer(), { excludeTestServices: true })("SealingKeyCheck", (it) => {
  it.effect(
    "WorkerRefusesWrongSealingKey: the first key is recorded, the same key passes again, another is refused naming BOTHY_WEBHOOK_SECRET_KEY and both key ids",
    () =>
      Effect.gen(function* () {
        yield* forget
        const first = yield* newKey()
        const other = yield* newKey()
        yield* verify(first)
        assert.deepStrictEqual(yield* recorded, [{ keyId: first.id }])
        yield* verify(first)
        const error = refusal(yield* Effect.exit(verify(other)))
        assert.deepStrictEqual(
          [error.variable, error.keyId, error.databaseKeyId],
          ["BOTHY_WEBHOOK_SECRET_KEY", other.id, first.id],
        )
        assert.include(error.message, "BOTHY_WEBHOOK_SECRET_KEY")
        assert.include(error.message, other.id)
        assert.include(error.message, first.id)
        assert.notInclude(error.message, "\n")
        assert.deepStrictEqual(yield* recorded, [{ keyId: first.id }], "the refused key changed nothing")
      }),
  )

  it.effect("WorkerRefusesWrongSealingKey: a check value that another key's id was forged onto is refused too", () =>
    Effect.gen(function* () {
      yield* forget
      const sql = yield* SqlClient.SqlClient
      const first = yield* newKey()
      const other = yield* newKey()
      yield* verify(first)
      // The row claims the other key's id, but its check value opens only under the first key.
      const [row] = yield* sql<{ sealed: string }>`SELECT check_sealed AS sealed FROM webhook_sealing_key`
      const forged = row!.sealed.replace(first.id, other.id)
      yield* sql`UPDATE webhook_sealing_key SET key_id = ${other.id}, check_sealed = ${forged}`
      assert.instanceOf(refusal(yield* Effect.exit(verify(other))), SealingKeyMismatch)
    }),
  )

  it.effect(
    "WorkerRefusesWrongSealingKey: a database with secrets sealed before the check takes the key they were sealed under",
    () =>
      Effect.gen(function* () {
        yield* forget
        const sql = yield* SqlClient.SqlClient
        const older = yield* newKey()
        const other = yield* newKey()
        const sealed = SecretBox.seal(older, Redacted.make("whsec_old"))
        yield* sql`
          INSERT INTO webhook_subscriptions (owner, url, secret_sealed, started_seq, last_delivered_seq)
          VALUES ('owner', 'https://8.8.8.8/', ${sealed}, 0, 0)`
        const error = refusal(yield* Effect.exit(verify(other)))
        assert.strictEqual(error.databaseKeyId, older.id)
        assert.deepStrictEqual(yield* recorded, [], "nothing recorded for the refused key")
        yield* verify(older)
        assert.deepStrictEqual(yield* recorded, [{ keyId: older.id }])
      }),
  )

  it.effect(
    "WorkerRefusesWrongSealingKey: WebhookSubscriptions.layer runs the same check; with another key it does not build and creates nothing",
    () =>
      Effect.gen(function* () {
        yield* forget
        const sql = yield* SqlClient.SqlClient
        const first = yield* newKey()
        const other = yield* newKey()
        const webhooksWith = (secretKey: SecretBox.SecretKey) =>
          WebhookSubscriptions.layer.pipe(
            Layer.provide(
              WebhookConfig.layerWith({
                secretKey,
                policy: { allowHttpLoopback: false, allowCidrs: [], allowHosts: [] },
              }),
            ),
            Layer.provide(EventLog.layer),
            Layer.provide(Layer.succeed(SqlClient.SqlClient, sql)),
          )
        yield* Effect.flatMap(WebhookSubscriptions, (w) =>
          w.create({ owner: "o", url: "https://8.8.8.8/", eventTypes: [], scope: ["s"] }),
        ).pipe(Effect.provide(webhooksWith(first)))
        const exit = yield* Layer.build(webhooksWith(other)).pipe(Effect.scoped, Effect.exit)
        const error = refusal(exit)
        assert.deepStrictEqual([error.keyId, error.databaseKeyId], [other.id, first.id])
        const [count] = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM webhook_subscriptions`
        assert.strictEqual(count!.n, 1)
      }),
  )

  it.effect(
    "WorkerRefusesWrongSealingKey: first use is race-free: starters with one key all pass; with two keys exactly one is recorded and the other's starters are refused",
    () =>
      Effect.gen(function* () {
        const starters = yield* pools(8)
        for (let round = 0; round < 10; round++) {
          yield* forget
          const a = yield* newKey()
          const b = yield* newKey()
          // Odd rounds: everyone has key a. Even rounds: half have a, half b.
          const keys = starters.map((_, i) => (round % 2 === 1 || i % 2 === 0 ? a : b))
          const go = yield* Deferred.make<void>()
          const exits = yield* Effect.forEach(
            starters,
            (context, i) =>
              Deferred.await(go).pipe(Effect.andThen(verify(keys[i]!)), Effect.provideContext(context), Effect.exit),
            { concurrency: "unbounded" },
          ).pipe(Effect.forkChild)
          yield* Deferred.succeed(go, undefined)
          const results = yield* Fiber.join(exits)
          const rows = yield* recorded
          assert.strictEqual(rows.length, 1, `round ${round}: one key recorded`)
          const winner = rows[0]!.keyId
          results.forEach((exit, i) => {
            if (keys[i]!.id === winner)
              assert.isTrue(Exit.isSuccess(exit), `round ${round}, starter ${i} holds the key`)
            else assert.strictEqual(refusal(exit).databaseKeyId, winner, `round ${round}, starter ${i}`)
          })
          if (round % 2 === 1) assert.isTrue(results.every(Exit.isSuccess), `round ${round}: one key, all pass`)
        }
      }).pipe(Effect.scoped),
  )
})
