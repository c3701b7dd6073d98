/**
 * The figures a chaos verdict reports beside its zero counts: how much the run produced, carried
 * and denied, so that a passing verdict also shows it was a real test (thousands of events, most
 * of them accepted, some denied under revokes).
 */
import type { Ledger } from "./Ledger.ts"
import * as Tally from "./Tally.ts"

const accepted = (status: number) => status >= 200 && status < 300

export const of = (ledger: Ledger, tally: Tally.Tally): Record<string, number> => {
  const { run, recorded, live, subscriptions, registrations } = ledger
  const { produced, tenants } = run
  const owed = subscriptions.flatMap((s) => s.owed)
  const pushOwed = registrations.flatMap((r) => r.owed)
  const pushReceived = registrations.flatMap((r) => r.received)
  return {
    events: live.length,
    events_lost_to_retention: tenants.oldSeqs.length,
    head: Number(recorded.head),
    transactions: produced.transactions,
    committed_keys: produced.committed.size,
    rolled_back_keys: produced.rolledBack.size,
    in_doubt_keys: produced.inDoubt.size,
    in_doubt_in_log: [...produced.inDoubt].filter((k) => ledger.byKey.has(k)).length,
    webhook_delivery_rows: subscriptions.reduce((n, s) => n + s.rows.length, 0),
    webhook_requests: [...subscriptions, ...ledger.gapSubscriptions].reduce((n, s) => n + s.arrivals.length, 0),
    webhook_accepted: subscriptions
      .flatMap((s) => s.received)
      .filter((r) => r.event !== undefined && accepted(r.arrival.status)).length,
    webhook_denied: owed.filter((o) => o.fate === "denied").length,
    push_jobs: recorded.jobs.length,
    push_expected: pushOwed.length,
    push_messages: pushReceived.length,
    push_accepted: pushReceived.filter((r) => accepted(r.arrival.status)).length,
    push_denied: pushOwed.filter((o) => o.fate === "denied").length,
    worker_start_failures: run.startFailures,
    sequence_gaps_suppressed_after_crash: Tally.count(tally, "sequence_gaps_suppressed_after_crash"),
    ...Object.fromEntries(
      recorded.endings.map((e) => [`webhook_rows_${e.state}${e.reason ? `_${e.reason}` : ""}`, e.n]),
    ),
  }
}
