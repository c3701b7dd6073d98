/**
 * Drain runs in flight in this worker, per subscription owner. A run whose owner already has `cap`
 * of them gives its job slot back at once (a short jittered snooze that keeps the subscription's
 * drain slot, so nothing pending waits for a round), so one owner's slow or failing endpoints
 * never hold every slot of the `webhooks` queue while other owners' deliveries wait.
 */
import { Duration, Effect } from "effect"

export const make = (cap: number) => {
  const running = new Map<string, number>()
  return {
    /** Counts a run of `owner` in; false when the owner is at the cap (the run must not start). */
    enter: (owner: string) =>
      Effect.sync(() => {
        const n = running.get(owner) ?? 0
        if (n >= cap) return false
        running.set(owner, n + 1)
        return true
      }),
    leave: (owner: string) =>
      Effect.sync(() => {
        const n = (running.get(owner) ?? 1) - 1
        if (n <= 0) running.delete(owner)
        else running.set(owner, n)
      }),
  }
}

/** How long a run turned away by the cap waits: 0.25 to 1 s, spread so the waiting runs do not come back together. */
export const snooze = () => Duration.millis(250 + Math.floor(Math.random() * 750))
