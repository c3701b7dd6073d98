/**
 * News of a subscription for the drainers running it in this worker: a round's NOTIFY on
 * `DrainSlot.drainChannel` (payload: the subscription id), or any reconnect of the shared LISTEN
 * connection, after which anything may have been missed. A run registers for its whole life, so
 * no news between a read and a wait is lost; a run starts with news, so its first read never waits.
 */
import { type Duration, Effect, type Scope } from "effect"
import { NotificationStream } from "../../platform/NotificationStream.ts"
import { drainChannel } from "./DrainSlot.ts"

export interface News {
  /** A round reported deliveries (or the LISTEN connection came back) since the last `clear()`. */
  readonly fresh: () => boolean
  readonly clear: () => void
  /** Something is pending after all (a release found it, or deliveries read were put back). */
  readonly mark: () => void
  /** Returns at the next news, or after `linger`. */
  readonly wait: Effect.Effect<void>
}

/** Subscribes this worker's drainers to `drainChannel`; returns how one run registers for its news. */
export const subscribe = (linger: Duration.Duration) =>
  Effect.gen(function* () {
    const waiting = new Map<string, Set<() => void>>()
    const stream = yield* NotificationStream
    yield* stream.subscribe(drainChannel, (wake) =>
      Effect.sync(() => {
        const woken = wake._tag === "Connected" ? [...waiting.values()] : [waiting.get(wake.payload) ?? new Set()]
        for (const set of woken) for (const w of set) w()
      }),
    )
    return (subscriptionId: string): Effect.Effect<News, never, Scope.Scope> =>
      Effect.gen(function* () {
        let news = true
        let wakeUp: (() => void) | undefined
        const onNews = () => {
          news = true
          wakeUp?.()
        }
        const set = waiting.get(subscriptionId) ?? new Set()
        waiting.set(subscriptionId, set)
        set.add(onNews)
        yield* Effect.addFinalizer(() =>
          Effect.sync(() => {
            set.delete(onNews)
            if (set.size === 0) waiting.delete(subscriptionId)
          }),
        )
        const next = Effect.callback<void>((resume) => {
          if (news) return resume(Effect.void)
          wakeUp = () => {
            wakeUp = undefined
            resume(Effect.void)
          }
          return Effect.sync(() => {
            wakeUp = undefined
          })
        })
        return {
          fresh: () => news,
          clear: () => {
            news = false
          },
          mark: onNews,
          // timeoutOption: a linger that runs out is no error (`timeout` built one, with its stack, each time).
          wait: Effect.asVoid(Effect.timeoutOption(next, linger)),
        }
      })
  })
