/**
 * `ours` in `append`: `EventLog.appendAfter` on the counter, one fiber per producer, on a pool
 * with every connection open before the clock starts, as the `pg` baselines' clients are.
 */
import { Effect, Latch, Layer } from "effect"
import { SqlClient } from "effect/sql"
import type { NewEvent } from "../../src/log/Event.ts"
import { type Appended, EventLog } from "../../src/log/EventLog.ts"
import type { BenchServer } from "../harness/BenchServer.ts"
import * as Throughput from "../harness/Throughput.ts"

/**
 * The pool opens connections in the background; holding all of them at once makes it finish, so
 * that ours, like the baselines (whose clients connect before the clock starts), is measured
 * with every connection open and authenticated.
 */
export const openEveryConnection = (connections: number) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const allHeld = yield* Latch.make()
    let held = 0
    yield* Effect.forEach(
      Array.from({ length: connections }),
      () =>
        sql.withTransaction(
          Effect.gen(function* () {
            yield* sql`SELECT 1`
            if (++held === connections) yield* allHeld.open
            yield* allHeld.await
          }),
        ),
      { concurrency: "unbounded", discard: true },
    )
  })

/** One fiber per producer, each committing the batches in turn until the window closes. */
export const appendLoops = (
  log: EventLog["Service"],
  producers: number,
  batches: ReadonlyArray<ReadonlyArray<NewEvent>>,
  tally: Throughput.Tally,
  committed?: (appended: Appended) => void,
) =>
  Effect.forEach(
    Array.from({ length: producers }, (_, p) => p),
    (p) =>
      Effect.gen(function* () {
        for (let k = p; !tally.stopped; k++) {
          const batch = batches[k % batches.length]!
          const { appended } = yield* log.appendAfter(Effect.void, () => batch)
          if (committed !== undefined && appended._tag === "Some") committed(appended.value)
          tally.add(batch.length)
        }
      }),
    { concurrency: "unbounded", discard: true },
  )

export const counter = (
  server: BenchServer["Service"],
  settings: Throughput.Settings,
  producers: number,
  batches: ReadonlyArray<ReadonlyArray<NewEvent>>,
) =>
  Effect.gen(function* () {
    const log = yield* EventLog
    yield* openEveryConnection(producers)
    return yield* Throughput.measure(settings, (tally) => appendLoops(log, producers, batches, tally))
  }).pipe(Effect.provide(EventLog.layer.pipe(Layer.provideMerge(server.pool(producers)))))
