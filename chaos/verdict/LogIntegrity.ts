/**
 * Judges the log against what the producers were told: it is gapless from 1 to the head but for
 * the range retention took, it holds every key whose commit answered, and none rolled back on
 * purpose (keys in doubt may go either way: the log is their truth).
 */
import type { Ledger } from "./Ledger.ts"
import * as Tally from "./Tally.ts"

export const family = ["log_holes", "committed_missing_from_log", "rolled_back_in_log"] as const

export const judge = (ledger: Ledger): Tally.Tally => {
  const tally = Tally.make()
  const { produced, tenants } = ledger.run
  const taken = new Set(tenants.oldSeqs)
  for (let s = 1n; s <= ledger.recorded.head; s++)
    if (!ledger.bySeq.has(s) && !taken.has(s)) Tally.add(tally, "log_holes", `seq ${s}`)
  for (const k of produced.committed) if (!ledger.byKey.has(k)) Tally.add(tally, "committed_missing_from_log", k)
  for (const k of produced.rolledBack) if (ledger.byKey.has(k)) Tally.add(tally, "rolled_back_in_log", k)
  return tally
}
