/**
 * A pending `event_log` partition detach, made the way it happens: `DETACH PARTITION ...
 * CONCURRENTLY` waits for a reader whose snapshot still sees the partition, and is cancelled while
 * it waits (`pg_cancel_backend`), which leaves the partition `inhdetachpending`.
 */
import { Deferred, Effect, Fiber } from "effect"
import { SqlClient } from "effect/sql"
import { eventually } from "./Eventually.ts"
import * as TestDatabase from "./TestDatabase.ts"

/** Rows of `pg_inherits` for `event_log` whose detach is pending. */
export const pending = Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => sql<{ name: string }>`
    SELECT c.relname AS name FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid
    WHERE i.inhparent = 'event_log'::regclass AND i.inhdetachpending ORDER BY c.relname`,
).pipe(Effect.map((rows) => rows.map((r) => r.name)))

/** Leaves the detach of `partition` pending; returns once it is, with no reader or detach left running. */
export const leave = (partition: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const reader = yield* TestDatabase.otherClient
    const detacher = yield* TestDatabase.otherClient
    const reading = yield* Deferred.make<void>()
    const done = yield* Deferred.make<void>()
    const read = yield* reader
      .withTransaction(
        Effect.gen(function* () {
          yield* reader`SET TRANSACTION ISOLATION LEVEL REPEATABLE READ`
          yield* reader`SELECT count(*) FROM event_log`
          yield* Deferred.succeed(reading, undefined)
          yield* Deferred.await(done)
        }),
      )
      .pipe(Effect.forkChild)
    yield* Deferred.await(reading)
    const detach = yield* detacher
      .unsafe(`ALTER TABLE event_log DETACH PARTITION "${partition}" CONCURRENTLY`)
      .pipe(Effect.exit, Effect.forkChild)
    // Cancelled while it waits for the reader: the first of its two transactions has committed.
    const waiting = sql<{ pid: number }>`
      SELECT pid FROM pg_stat_activity
      WHERE datname = current_database() AND query LIKE 'ALTER TABLE event_log DETACH PARTITION%CONCURRENTLY'
        AND wait_event_type = 'Lock'`
    const [detaching] = yield* eventually(waiting, (rows) => rows.length === 1, {
      what: `the detach of ${partition} waiting for the reader`,
      within: "30 seconds",
      every: "20 millis",
    })
    yield* sql`SELECT pg_cancel_backend(${detaching!.pid})`
    const exit = yield* Fiber.join(detach)
    yield* Deferred.succeed(done, undefined)
    yield* Fiber.join(read)
    return exit
  }).pipe(Effect.scoped)
