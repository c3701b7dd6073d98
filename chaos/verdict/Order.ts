/**
 * Judges order per subscription: the first arrival of each `webhook-id` comes in seq order with a
 * rising `sequence`, and the `sequence` numbers the receiver saw (answered or not) run 1..N. A
 * missing number is named with the delivery row that holds it; one held by a delivery then ended
 * as denied is the documented edge of a crashed drainer's numbers (docs/receivers.md, "Webhooks":
 * its request may have gone out, so the number stays), counted apart as a figure, not as a gap.
 */
import type { Ledger, SubscriptionFacts } from "./Ledger.ts"
import * as Tally from "./Tally.ts"

export const family = ["order_violations", "sequence_gaps"] as const

const firstArrivals = (tally: Tally.Tally, s: SubscriptionFacts) => {
  let maxSeq = 0n
  let maxSequence = 0
  for (const { arrival: a, event: e, before } of s.received) {
    if (e === undefined || before !== undefined) continue
    if (e.seq <= maxSeq || a.sequence <= maxSequence)
      Tally.add(
        tally,
        "order_violations",
        `${s.plan.name}: ${a.key} (seq ${e.seq}, sequence ${a.sequence}, ${a.webhookId}) at ${new Date(a.at).toISOString()} after seq ${maxSeq} (sequence ${maxSequence})`,
      )
    maxSeq = e.seq > maxSeq ? e.seq : maxSeq
    maxSequence = Math.max(maxSequence, a.sequence)
  }
}

const numbers = (tally: Tally.Tally, s: SubscriptionFacts) => {
  // One seen only on a failed request whose delivery was then denied is no gap: it was seen.
  const seen = new Set(s.received.filter((r) => r.event !== undefined).map((r) => r.arrival.sequence))
  const top = Math.max(0, ...seen)
  if (seen.size === top) return
  const holders = new Map(s.rows.filter((r) => r.sequence !== null).map((r) => [Number(r.sequence), r]))
  for (let n = 1; n <= top; n++) {
    if (seen.has(n)) continue
    const r = holders.get(n)
    const held = r === undefined ? "no row" : `seq ${r.seq} ${r.state}${r.reason === null ? "" : `/${r.reason}`}`
    if (r?.state === "dead" && (r.reason === "permission" || r.reason === "scope"))
      Tally.add(tally, "sequence_gaps_suppressed_after_crash", `${s.plan.name}: number ${n} (${held})`)
    else Tally.add(tally, "sequence_gaps", `${s.plan.name}: number ${n} never seen (${held})`)
  }
}

export const judge = (ledger: Ledger): Tally.Tally => {
  const tally = Tally.make()
  for (const s of ledger.subscriptions) {
    firstArrivals(tally, s)
    numbers(tally, s)
  }
  return tally
}
