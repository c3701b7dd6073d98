/**
 * Counts every request that came again under an id already seen, by its cause: after an accepted
 * one, the last crash-like fault before it (the sender could not record its success); after a
 * failed one, the receiver's answer (a retry). Figures, not failures: re-sends are allowed, their
 * effect counts once (see `Duplicates`).
 */
import type { Before, Ledger } from "./Ledger.ts"

const crashKinds = new Set(["sigkill", "sigterm", "terminate-backends", "pg-restart"])

export const count = (ledger: Ledger): Record<string, number> => {
  const resends: Record<string, number> = {}
  const add = (cause: string) => {
    resends[cause] = (resends[cause] ?? 0) + 1
  }
  const causeBefore = (at: number) => {
    let cause = "no fault before"
    for (const f of ledger.run.history.injected) if (f.at <= at && crashKinds.has(f.kind)) cause = f.kind
    return cause
  }
  const answer = (before: number) => (before === 0 ? "hang" : -before)
  const again = (before: Before, at: number, retry: string, crash = (c: string) => c) => {
    if (before !== undefined) add(before > 0 ? crash(causeBefore(at)) : `${retry} ${answer(before)}`)
  }
  for (const s of ledger.subscriptions)
    for (const r of s.received) if (r.event !== undefined) again(r.before, r.arrival.at, "retry after receiver answer")
  for (const reg of ledger.registrations)
    for (const r of reg.received) again(r.before, r.arrival.at, "push: retry after answer", (c) => `push: ${c}`)
  return resends
}
