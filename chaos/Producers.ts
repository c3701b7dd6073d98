/**
 * The producers of a chaos run: `producers` fibers appending through bothy's `EventLog` at a steady
 * total rate, each transaction of 1 to 10 events in random spaces, some of them rolled back on
 * purpose after the append. Every event carries a key of its own (`data.key`), and each key ends in
 * exactly one of three sets: committed (the commit answered), rolled back (on purpose), or in doubt
 * (the connection broke around the commit: a fault, so either outcome is allowed). The verdict takes
 * the log as the truth for the in-doubt ones, and checks the other two against it.
 */
import { Cause, Effect, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { EventLog } from "../src/log/EventLog.ts"
import * as SeededRandom from "./SeededRandom.ts"
import * as World from "./World.ts"

class IntendedRollback extends Schema.TaggedError<IntendedRollback>()("IntendedRollback", {}) {}

export interface Produced {
  readonly committed: Set<string>
  readonly rolledBack: Set<string>
  readonly inDoubt: Set<string>
  /** Transactions that failed on a fault (their keys are in doubt). */
  failures: number
  transactions: number
}

export const rollbackShare = 0.05

export const run = (options: {
  readonly world: World.World
  readonly events: number
  readonly ratePerSecond: number
  readonly producers: number
  readonly seed: number
  /** Stop early once this returns true (a `--duration` run ends by time). */
  readonly enough?: () => boolean
}) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const log = yield* EventLog
    const produced: Produced = {
      committed: new Set(),
      rolledBack: new Set(),
      inDoubt: new Set(),
      failures: 0,
      transactions: 0,
    }
    let reserved = 0
    const perProducer = options.ratePerSecond / options.producers
    const producer = (p: number) =>
      Effect.gen(function* () {
        const random = SeededRandom.make(options.seed * 7919 + p)
        let n = 0
        while (reserved < options.events && options.enough?.() !== true) {
          const rollback = random.chance(rollbackShare)
          const size = Math.min(random.int(1, 10), rollback ? 10 : options.events - reserved)
          if (!rollback) reserved += size
          const events = Array.from({ length: size }, () => {
            const key = `p${p}-${n++}`
            return {
              space: random.pick(options.world.spaces),
              type: random.pick(World.eventTypes),
              actor: random.pick(options.world.actors),
              payload: { key, summary: `event ${key}` },
            }
          })
          const keys = events.map((e) => e.payload.key)
          const started = Date.now()
          const outcome = yield* sql
            .withTransaction(
              Effect.gen(function* () {
                yield* log.append(events)
                if (rollback) return yield* new IntendedRollback()
              }),
            )
            .pipe(
              Effect.as("committed" as const),
              Effect.catchTag("IntendedRollback", () => Effect.succeed("rolledBack" as const)),
              // A broken connection may surface as a defect of the pool, not only as a failure.
              Effect.catchCause((cause) =>
                Cause.hasInterruptsOnly(cause) ? Effect.failCause(cause) : Effect.succeed("inDoubt" as const),
              ),
            )
          produced.transactions++
          for (const k of keys) produced[outcome].add(k)
          if (outcome === "inDoubt") {
            produced.failures++
            yield* Effect.sleep("300 millis")
          }
          const pause = (size * 1000) / perProducer - (Date.now() - started)
          if (pause > 0) yield* Effect.sleep(pause)
        }
      })
    yield* Effect.forEach(
      Array.from({ length: options.producers }, (_, p) => p),
      producer,
      { concurrency: "unbounded", discard: true },
    )
    return produced
  })
