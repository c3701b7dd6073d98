/**
 * Retention with `DATABASE_URL` through PgBouncer in transaction mode. FINALIZE and the drops run
 * each in a transaction of its own, which the pooler carries; DETACH CONCURRENTLY needs a session
 * of its own (its timeouts are session settings), so without `DATABASE_DIRECT_URL` it is skipped
 * with `PoolerSessionOnly`, and with it, it goes over the direct URL.
 */
import { assert, describe, it } from "@effect/vitest"
import { ConfigProvider, Context, Duration, Effect, Layer } from "effect"
import { SqlClient } from "effect/sql"
import { inject } from "vitest"
import * as Retention from "../../src/log/Retention.ts"
import * as Database from "../../src/platform/Database.ts"
import * as DatabaseSessions from "../../src/platform/DatabaseSessions.ts"
import * as Pooler from "../../testkit/Pooler.ts"
import { appendAt, dayMillis, days } from "../support/OldEvents.ts"
import * as TestDatabase from "../support/TestDatabase.ts"

/** `Database.layer` with `env` as the environment. */
const database = (env: Record<string, string>) =>
  Layer.build(Database.layer.pipe(Layer.provide(ConfigProvider.layer(ConfigProvider.fromEnv({ env })))))

const attached = Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => sql<{ name: string }>`
    SELECT c.relname AS name FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid
    WHERE i.inhparent = 'event_log'::regclass ORDER BY 1`,
)

describe("retention behind a transaction pooler", () => {
  it.live(
    "PoolerSessionOnlyIsATypedError: through PgBouncer in transaction mode without DATABASE_DIRECT_URL, retention's DETACH CONCURRENTLY fails with PoolerSessionOnly naming the pooler and DATABASE_DIRECT_URL (never Query failed), and with DATABASE_DIRECT_URL it detaches and drops",
    () =>
      Effect.gen(function* () {
        const { name, directUrl: direct } = yield* TestDatabase.cloneForProcesses("retention_pooler")
        const pooler = yield* Pooler.start(Pooler.targetOf(inject("pgAdminUrl")), "transaction")
        const pooled = pooler.urlOf(name)
        const directPool = yield* Layer.build(TestDatabase.poolOn(direct))
        const now = Date.now()
        yield* Effect.gen(function* () {
          yield* days(now - 12 * dayMillis, 12)
          yield* appendAt([now - 11 * dayMillis, now - 9 * dayMillis, now - dayMillis])
        }).pipe(Effect.provide(directPool))
        const before = (yield* attached.pipe(Effect.provide(directPool))).map((r) => r.name)

        const pooledOnly = yield* database({ DATABASE_URL: pooled })
        const at = new URL(pooled).host
        const refused = yield* Effect.flip(DatabaseSessions.session("a test's session")).pipe(
          Effect.provide(pooledOnly),
        )
        assert.strictEqual(refused._tag, "PoolerSessionOnly")
        assert.deepStrictEqual(
          { pooler: refused.pooler, variable: refused.variable },
          { pooler: at, variable: "DATABASE_DIRECT_URL" },
        )
        const skipping = yield* Retention.run({ retention: Duration.days(7), dropPause: Duration.zero }).pipe(
          Effect.provide(pooledOnly),
        )
        assert.deepStrictEqual(skipping.detached, [])
        assert.isAbove(skipping.skipped.length, 0, JSON.stringify(skipping))
        for (const s of skipping.skipped) {
          assert.strictEqual(
            s.reason,
            `retention's DETACH PARTITION ... CONCURRENTLY needs a database session of its own, which the transaction pooler at ${at} (DATABASE_URL) does not keep: set DATABASE_DIRECT_URL to a direct connection to the server`,
          )
        }
        // Nothing detached. (Days ahead may have been added: past midnight UTC, the run's first
        // retention creates a day the database, made the day before, did not have.)
        const still = (yield* attached.pipe(Effect.provide(directPool))).map((r) => r.name)
        assert.deepStrictEqual(
          before.filter((day) => !still.includes(day)),
          [],
          "no day detached",
        )

        const withDirect = yield* database({ DATABASE_URL: pooled, DATABASE_DIRECT_URL: direct })
        const sessions = Context.get(withDirect, DatabaseSessions.DatabaseSessions)
        assert.deepStrictEqual(sessions.route, { _tag: "Pooler", mode: "transaction", at })
        const run = yield* Retention.run({ retention: Duration.days(7), dropPause: Duration.zero }).pipe(
          Effect.provide(withDirect),
        )
        assert.deepStrictEqual(run.skipped, [])
        // A run that crosses midnight UTC between the two may detach one day more, never fewer.
        assert.includeMembers(
          [...run.detached],
          skipping.skipped.map((s) => s.partition),
        )
        assert.isAtMost(run.detached.length, skipping.skipped.length + 1)
        assert.deepStrictEqual(run.dropped, run.detached, "the drops, each in a transaction, went through the pooler")
        const after = (yield* attached.pipe(Effect.provide(directPool))).map((r) => r.name)
        assert.isTrue(run.detached.every((d) => before.includes(d) && !after.includes(d)))
      }).pipe(Effect.scoped),
    60_000,
  )
})
