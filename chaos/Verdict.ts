/**
 * The verdict of a chaos run, computed after the drain from what the database holds
 * (`verdict/Recorded`) and what the harness recorded (the world, the producers' keys, the two
 * receivers, the history of faults), never from bothy's own counters. One judge per family of
 * counts that must be zero, each in `verdict/`:
 *
 * - `Duplicates`: one delivery row or push job per (event, receiver), none extra, one effect per event;
 * - `Losses`: every delivery allowed at its time was accepted at least once;
 * - `Order`: first arrivals in seq order, `sequence` numbers seen 1..N;
 * - `Permissions`: nothing arrived while its right was surely revoked or after a 410, nothing denied
 *   without a revoke near;
 * - `LogIntegrity`: the log gapless but for the range retention took, committed keys in, rolled-back out;
 * - `RetentionGap`: the gap disabled exactly the subscriptions that began before it, with cause `gap`;
 * - `Settled`: cursors at the head, no job running, nothing pending;
 * - `Rejections`: every request verified, every push decrypted;
 * - `HarnessFailures`: no worker exited unasked, every fault carried out.
 *
 * Every count of `Zeros` belongs to exactly one judge's `family`; a count no judge raised is zero.
 */
import { Effect } from "effect"
import * as Duplicates from "./verdict/Duplicates.ts"
import * as Figures from "./verdict/Figures.ts"
import * as HarnessFailures from "./verdict/HarnessFailures.ts"
import * as Ledger from "./verdict/Ledger.ts"
import * as LogIntegrity from "./verdict/LogIntegrity.ts"
import * as Losses from "./verdict/Losses.ts"
import * as Order from "./verdict/Order.ts"
import * as Permissions from "./verdict/Permissions.ts"
import * as Recorded from "./verdict/Recorded.ts"
import * as Rejections from "./verdict/Rejections.ts"
import * as Resends from "./verdict/Resends.ts"
import * as RetentionGap from "./verdict/RetentionGap.ts"
import * as Settled from "./verdict/Settled.ts"
import * as Tally from "./verdict/Tally.ts"

export type { Options, Run } from "./verdict/Ledger.ts"
export type { Zeros } from "./verdict/Tally.ts"
export const defaults = Ledger.defaults

export interface Verdict {
  readonly zeros: Tally.Zeros
  readonly figures: Record<string, number>
  readonly resends: Record<string, number>
  readonly examples: Record<string, ReadonlyArray<string>>
}

export const judges = [
  LogIntegrity,
  RetentionGap,
  Duplicates,
  Losses,
  Order,
  Permissions,
  Settled,
  Rejections,
  HarnessFailures,
] as const

/** The verdict on a run whose database and records are already read. */
export const of = (ledger: Ledger.Ledger): Verdict => {
  const tally = Tally.merge(judges.map((j) => j.judge(ledger)))
  const c = (name: keyof Tally.Zeros) => Tally.count(tally, name)
  // In this order in the report and the result's `targets`.
  const zeros: Tally.Zeros = {
    duplicates_created: c("duplicates_created"),
    lost: c("lost"),
    order_violations: c("order_violations"),
    sequence_gaps: c("sequence_gaps"),
    denied_but_delivered: c("denied_but_delivered"),
    wrongly_denied: c("wrongly_denied"),
    jobs_left_running: c("jobs_left_running"),
    deliveries_left_pending: c("deliveries_left_pending"),
    cursors_behind_head: c("cursors_behind_head"),
    log_holes: c("log_holes"),
    committed_missing_from_log: c("committed_missing_from_log"),
    rolled_back_in_log: c("rolled_back_in_log"),
    gaps_unreported: c("gaps_unreported"),
    unverified_requests: c("unverified_requests"),
    undecryptable_pushes: c("undecryptable_pushes"),
    doubled_effects: c("doubled_effects"),
    sent_after_gone: c("sent_after_gone"),
    workers_exited_unasked: c("workers_exited_unasked"),
    worker_start_failures_unexplained: c("worker_start_failures_unexplained"),
    faults_not_carried_out: c("faults_not_carried_out"),
  }
  return { zeros, figures: Figures.of(ledger, tally), resends: Resends.count(ledger), examples: tally.examples }
}

/** Reads the database once and judges the run. */
export const judge = (run: Ledger.Run) => Effect.map(Recorded.load, (recorded) => of(Ledger.make(run, recorded)))

/** The zero counts that did not hold. */
export const failing = (verdict: Verdict): ReadonlyArray<keyof Tally.Zeros> =>
  (Object.keys(verdict.zeros) as Array<keyof Tally.Zeros>).filter((name) => verdict.zeros[name] !== 0)
