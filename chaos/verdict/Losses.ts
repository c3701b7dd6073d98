/**
 * Judges that nothing allowed was lost: every live event a subscription matches has its delivery
 * row and was accepted (2xx) at least once, unless bothy ended it as denied; every event a push
 * registration's principal hears of was accepted, unless denied or owed to the doomed registration
 * after its 410.
 */
import type { Ledger } from "./Ledger.ts"
import * as Tally from "./Tally.ts"

export const family = ["lost"] as const

export const judge = (ledger: Ledger): Tally.Tally => {
  const tally = Tally.make()
  for (const s of ledger.subscriptions)
    for (const { event: e, row, fate } of s.owed) {
      if (fate === "no row") Tally.add(tally, "lost", `${s.plan.name}: no delivery row for seq ${e.seq} (${e.key})`)
      if (fate === "unaccepted" && row !== undefined)
        Tally.add(
          tally,
          "lost",
          `${s.plan.name}: seq ${e.seq} (${e.key}) is ${row.state}${row.reason ? ` (${row.reason})` : ""}, never accepted`,
        )
    }
  for (const r of ledger.registrations)
    for (const { event: e, job, fate } of r.owed) {
      if (fate === "no job") Tally.add(tally, "lost", `push ${r.registration.name}: no job for seq ${e.seq}`)
      if (fate === "unaccepted" && job !== undefined)
        Tally.add(tally, "lost", `push ${r.registration.name}: seq ${e.seq} job ${job.state}, never accepted`)
    }
  return tally
}
