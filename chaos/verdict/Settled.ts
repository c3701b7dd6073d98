/**
 * Judges that the run came to rest once drained and stopped: both cursors at the head, no job left
 * running, no webhook delivery left pending, and no push job still waiting for an event that was
 * neither accepted nor denied.
 */
import type { Ledger } from "./Ledger.ts"
import * as Tally from "./Tally.ts"

export const family = ["jobs_left_running", "deliveries_left_pending", "cursors_behind_head"] as const

const finished = new Set(["completed", "cancelled", "discarded"])

export const judge = (ledger: Ledger): Tally.Tally => {
  const tally = Tally.make()
  const { head, cursors, jobsRunning } = ledger.recorded
  Tally.add(tally, "jobs_left_running", undefined, jobsRunning)
  for (const s of ledger.subscriptions)
    for (const r of s.rows)
      if (r.state === "pending") Tally.add(tally, "deliveries_left_pending", `${s.plan.name} seq ${r.seq}`)
  for (const r of ledger.registrations)
    for (const { event, job, fate } of r.owed)
      if (fate === "unaccepted" && job !== undefined && !finished.has(job.state))
        Tally.add(tally, "deliveries_left_pending", `push ${r.registration.name} seq ${event.seq}: ${job.state}`)
  for (const c of cursors)
    if (c.lastSeq !== head) Tally.add(tally, "cursors_behind_head", `${c.name} at ${c.lastSeq}, head ${head}`)
  return tally
}
