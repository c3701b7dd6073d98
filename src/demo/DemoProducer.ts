/**
 * The demo's producer: appends events at a steady rate, round-robin over the demo's spaces and
 * two event types, each in a transaction of its own as a producer's would be. The rate is held on
 * average: each tick appends what the time since the start asks for, so a slow append is caught
 * up on the next tick rather than lost. An append that fails is counted and the producer goes on.
 */
import { Clock, Effect, Schedule } from "effect"
import { EventLog } from "../log/EventLog.ts"
import type { DemoCounts } from "./DemoCounts.ts"
import { spaces } from "./DemoSetup.ts"

const types = ["order.created", "comment.added"] as const

/** At most one append per tick; at high rates a tick appends several events together. */
const tick = "50 millis"

/** Runs until interrupted, appending `rate` events a second on average. */
export const run = (rate: number, counts: DemoCounts) =>
  Effect.gen(function* () {
    const log = yield* EventLog
    const started = yield* Clock.currentTimeMillis
    let made = 0
    const step = Effect.gen(function* () {
      const now = yield* Clock.currentTimeMillis
      // Capped per tick, so a long stall catches up over a few ticks rather than in one huge append.
      const due = Math.min(Math.floor(((now - started) / 1000) * rate) - made, 500)
      if (due <= 0) return
      const events = Array.from({ length: due }, (_, i) => {
        const n = made + i
        return {
          space: spaces[n % spaces.length]!,
          type: types[n % types.length]!,
          actor: "demo-producer",
          payload: { n, at: new Date(now).toISOString() },
        }
      })
      made += due
      // Counted with the append that committed it, never apart from it by an interruption.
      yield* log.append(events).pipe(
        Effect.tap(() =>
          Effect.sync(() => {
            counts.appended += due
          }),
        ),
        Effect.uninterruptible,
        Effect.catch((error) =>
          Effect.sync(() => {
            counts.appendFailures += due
          }).pipe(Effect.andThen(Effect.logWarning(`demo: an append failed: ${error.message}`))),
        ),
      )
    })
    return yield* step.pipe(Effect.repeat(Schedule.spaced(tick)), Effect.andThen(Effect.never))
  })
