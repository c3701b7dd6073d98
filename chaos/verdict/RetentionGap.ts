/**
 * Judges the gap retention made: the old events are gone from the log, both consumers were behind
 * them when they went, exactly the subscriptions that began before them are disabled with cause
 * `gap`, and none of those received anything.
 */
import type { Ledger } from "./Ledger.ts"
import * as Tally from "./Tally.ts"

export const family = ["gaps_unreported"] as const

export const judge = (ledger: Ledger): Tally.Tally => {
  const tally = Tally.make()
  const { history, tenants } = ledger.run
  const firstLost = tenants.oldSeqs[0] ?? 0n
  if (history.gap === undefined) Tally.add(tally, "gaps_unreported", "the retention-gap fault did not run")
  else if (history.gap.cursors.some((c) => c.lastSeq >= firstLost))
    Tally.add(tally, "gaps_unreported", "a consumer was not behind the old events when retention took them")
  for (const s of tenants.oldSeqs)
    if (ledger.bySeq.has(s)) Tally.add(tally, "gaps_unreported", `old event ${s} is still in the log`)
  const stateOf = new Map(ledger.recorded.subscriptions.map((s) => [s.id, s]))
  for (const s of tenants.subscriptions) {
    const row = stateOf.get(s.id)
    const disabledForGap = row?.state === "disabled" && row.cause === "gap"
    if (s.plan.gap !== disabledForGap)
      Tally.add(
        tally,
        "gaps_unreported",
        `${s.plan.name}: ${row?.state}/${row?.cause} (gap subscription: ${s.plan.gap})`,
      )
  }
  for (const s of ledger.gapSubscriptions) {
    const got = s.arrivals.filter((a) => a.status >= 200 && a.status < 300)
    if (got.length > 0)
      Tally.add(tally, "gaps_unreported", `${s.plan.name} (began before the gap) received ${got.length} deliveries`)
  }
  return tally
}
