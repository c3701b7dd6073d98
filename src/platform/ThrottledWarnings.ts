/**
 * Warnings about one thing (a webhook subscription, say) at most once per interval, timed by
 * `Clock`: an endpoint that keeps refusing says so once a minute, not on every retry of every
 * delivery. Only the last time per key is kept, and keys quiet for an interval are dropped once
 * there are many.
 */
import { Clock, Duration, Effect } from "effect"

const keep = 10_000

/** `log` is the level's logger (`Effect.logError` for what must page). */
export const make = (interval: Duration.Input, log: (message: string) => Effect.Effect<void> = Effect.logWarning) => {
  const millis = Duration.toMillis(Duration.fromInputUnsafe(interval))
  const last = new Map<string, number>()
  return (key: string, message: string) =>
    Effect.gen(function* () {
      const now = yield* Clock.currentTimeMillis
      const at = last.get(key)
      if (at !== undefined && now - at < millis) return
      if (last.size >= keep) for (const [k, t] of last) if (now - t >= millis) last.delete(k)
      last.set(key, now)
      yield* log(message)
    })
}
