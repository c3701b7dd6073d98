/**
 * Judges what went wrong outside the deliveries: a worker that exited while running without being
 * asked, a worker whose start failed with no fault to account for it, and a fault the harness
 * could not carry out (a run that did not inject its faults proves nothing about them).
 */
import type { Ledger } from "./Ledger.ts"
import * as Tally from "./Tally.ts"

export const family = ["workers_exited_unasked", "worker_start_failures_unexplained", "faults_not_carried_out"] as const

export const judge = (ledger: Ledger): Tally.Tally => {
  const tally = Tally.make()
  const { run } = ledger
  Tally.add(tally, "workers_exited_unasked", undefined, run.unexpectedExits)
  Tally.add(tally, "worker_start_failures_unexplained", undefined, run.startFailuresUnexplained)
  for (const f of run.history.failed) Tally.add(tally, "faults_not_carried_out", f.detail)
  return tally
}
