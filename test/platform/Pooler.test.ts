/**
 * bothy behind PgBouncer (Debian's, started by `testkit/Pooler`): how `Database.layer` finds the
 * pooler and its mode, where LISTEN goes, and that a LISTEN which cannot hear is told apart from one
 * that can. The database is made over the direct connection (a pooler would keep a connection to
 * the template open and fail `CREATE DATABASE ... TEMPLATE`); the code under test goes through the
 * pooler.
 */
import { assert, describe, it } from "@effect/vitest"
import { ConfigProvider, Context, Effect, Layer, Option, Queue } from "effect"
import { SqlClient } from "effect/sql"
import { inject } from "vitest"
import * as Database from "../../src/platform/Database.ts"
import { DatabaseSessions } from "../../src/platform/DatabaseSessions.ts"
import * as Migrations from "../../src/platform/Migrations.ts"
import { NotificationStream, type Wake } from "../../src/platform/NotificationStream.ts"
import * as Pooler from "../../testkit/Pooler.ts"
import * as TestDatabase from "../support/TestDatabase.ts"

/** A database made directly, and PgBouncer in `mode` in front of the server. */
const behind = (mode: Pooler.PoolMode) =>
  Effect.gen(function* () {
    const { name, directUrl: url } = yield* TestDatabase.cloneForProcesses("pooler")
    const pooler = yield* Pooler.start(Pooler.targetOf(inject("pgAdminUrl")), mode)
    return { direct: url, pooled: pooler.urlOf(name) }
  })

/** `Database.layer` and a `NotificationStream` on it, with `env` as the environment. */
const started = (env: Record<string, string>) =>
  Layer.build(
    NotificationStream.layer().pipe(
      Layer.provideMerge(Database.layer),
      Layer.provide(ConfigProvider.layer(ConfigProvider.fromEnv({ env }))),
    ),
  )

/** Subscribes to `channel`; its wake-ups arrive on the returned queue. */
const subscribe = (stream: NotificationStream["Service"], channel: string) =>
  Effect.gen(function* () {
    const wakes = yield* Queue.unbounded<Wake>()
    yield* stream.subscribe(channel, (w) => Queue.offer(wakes, w).pipe(Effect.asVoid))
    return wakes
  })

/** A NOTIFY sent through the pool reaches a subscriber of the stream (the timeout guards a hang). */
const notifyReaches = (context: Context.Context<NotificationStream | SqlClient.SqlClient>) =>
  Effect.gen(function* () {
    const stream = Context.get(context, NotificationStream)
    const sql = Context.get(context, SqlClient.SqlClient)
    const wakes = yield* subscribe(stream, "pooler_test")
    assert.deepStrictEqual(yield* Queue.take(wakes), { _tag: "Connected" })
    yield* sql`SELECT pg_notify('pooler_test', 'hello')`
    assert.deepStrictEqual(yield* Queue.take(wakes).pipe(Effect.timeout("20 seconds")), {
      _tag: "Notified",
      payload: "hello",
    })
  })

describe("behind a pooler", () => {
  it.live(
    "PoolerRouteDetected: Database.layer tells a transaction pooler, a session pooler and a direct server apart",
    () =>
      Effect.gen(function* () {
        for (const mode of ["transaction", "session"] as const) {
          const { pooled } = yield* behind(mode)
          const context = yield* started({ DATABASE_URL: pooled })
          const { route } = Context.get(context, DatabaseSessions)
          assert.strictEqual(route._tag, "Pooler", mode)
          assert.strictEqual(route._tag === "Pooler" ? route.mode : undefined, mode)
        }
        const { direct } = yield* behind("transaction")
        const context = yield* started({ DATABASE_URL: direct })
        assert.strictEqual(Context.get(context, DatabaseSessions).route._tag, "Direct")
      }).pipe(Effect.scoped),
    60_000,
  )

  it.live(
    "ListenThroughTransactionPoolerDetected: a LISTEN through PgBouncer in transaction mode never hears its probe NOTIFY; the stream says so in one line, runs poll-only (no listening backend, every subscriber woken once) and never pretends to listen",
    () =>
      Effect.gen(function* () {
        const { pooled } = yield* behind("transaction")
        // The pool through the pooler, with the pooler unknown to bothy (the default: a direct
        // server), so that only the probe can tell.
        const pool = yield* Layer.build(
          TestDatabase.poolOn(pooled, { prepare: false }).pipe(
            Layer.provideMerge(Layer.succeed(DatabaseSessions, DatabaseSessions.defaultValue())),
          ),
        )
        const context = yield* Layer.build(
          NotificationStream.layer(undefined, "1 second").pipe(Layer.provide(Layer.succeedContext(pool))),
        )
        const stream = Context.get(context, NotificationStream)
        const wakeups = yield* stream.wakeups
        assert.strictEqual(wakeups._tag, "PollOnly")
        assert.match(
          wakeups._tag === "PollOnly" ? wakeups.reason : "",
          /^LISTEN over DATABASE_URL did not hear its own NOTIFY within 1s \(a transaction pooler in between\?\); set DATABASE_DIRECT_URL/,
        )
        assert.deepStrictEqual(yield* stream.backendPid, Option.none(), "no listening backend is claimed")
        const wakes = yield* subscribe(stream, "pooler_test")
        assert.deepStrictEqual(yield* Queue.poll(wakes), Option.some({ _tag: "Connected" } as const))

        // Found at start by Database.layer instead: poll-only without trying, and the line says why.
        const known = yield* started({ DATABASE_URL: pooled })
        const line = yield* Context.get(known, NotificationStream).wakeups
        assert.deepStrictEqual(line, {
          _tag: "PollOnly",
          reason: `DATABASE_URL goes through a transaction pooler at ${new URL(pooled).host}, which cannot carry LISTEN; set DATABASE_DIRECT_URL to a direct connection for NOTIFY wake-ups`,
        })
      }).pipe(Effect.scoped),
    60_000,
  )

  it.live(
    "ListenOverDirectUrl: behind a transaction pooler with DATABASE_DIRECT_URL, LISTEN goes over the direct URL, hears its probe, and a NOTIFY committed through the pooler wakes its subscriber",
    () =>
      Effect.gen(function* () {
        const { pooled, direct } = yield* behind("transaction")
        const context = yield* started({ DATABASE_URL: pooled, DATABASE_DIRECT_URL: direct })
        const stream = Context.get(context, NotificationStream)
        assert.deepStrictEqual(yield* stream.wakeups, { _tag: "Notify", variable: "DATABASE_DIRECT_URL" })
        assert.isTrue(Option.isSome(yield* stream.backendPid))
        yield* notifyReaches(context)
      }).pipe(Effect.scoped),
    60_000,
  )

  it.live(
    "ListenThroughSessionPooler: PgBouncer in session mode keeps a session per client, so LISTEN through DATABASE_URL hears its probe and NOTIFYs",
    () =>
      Effect.gen(function* () {
        const { pooled } = yield* behind("session")
        const context = yield* started({ DATABASE_URL: pooled })
        assert.deepStrictEqual(yield* Context.get(context, NotificationStream).wakeups, {
          _tag: "Notify",
          variable: "DATABASE_URL",
        })
        yield* notifyReaches(context)
      }).pipe(Effect.scoped),
    60_000,
  )

  it.live(
    "MigrateThroughTransactionPooler: every migration applies to an empty database through PgBouncer in transaction mode, and a second run finds the schema current",
    () =>
      Effect.gen(function* () {
        const name = `t_pooler_migrate_${process.pid}_${Date.now()}`
        yield* Effect.acquireRelease(TestDatabase.adminSql(`CREATE DATABASE "${name}"`), () =>
          TestDatabase.adminSql(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`).pipe(Effect.ignore),
        )
        const pooler = yield* Pooler.start(Pooler.targetOf(inject("pgAdminUrl")), "transaction")
        const context = yield* started({ DATABASE_URL: pooler.urlOf(name) })
        const first = yield* Migrations.run.pipe(Effect.provide(context))
        assert.strictEqual(first.length, Object.keys(Migrations.migrations).length)
        assert.deepStrictEqual(yield* Migrations.run.pipe(Effect.provide(context)), [])
      }).pipe(Effect.scoped),
    60_000,
  )

  it.live("DirectUrlAloneRefused: DATABASE_DIRECT_URL without DATABASE_URL stops the start with one line", () =>
    Effect.gen(function* () {
      const failure = yield* Effect.flip(started({ DATABASE_DIRECT_URL: "postgres://u@127.0.0.1:1/d" }))
      assert.strictEqual(
        failure.message,
        "invalid configuration: DATABASE_DIRECT_URL is set but DATABASE_URL is not; set both, or neither to run an embedded PostgreSQL",
      )
      assert.notInclude(failure.message, "127.0.0.1", "the URL is never printed")
    }).pipe(Effect.scoped),
  )
})
