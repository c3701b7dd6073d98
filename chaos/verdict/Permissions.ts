/**
 * Judges deliveries against the rights at their time, which the harness knows only as windows
 * (each edge as a pair: before the statement, after its commit). A right counts as surely revoked
 * at `t` when its revoke committed before `t - slack` and its restore had not begun by `t` (the
 * slack covers the sender's check to the arrival: `webhook.permission_max_age` and a margin);
 * nothing may arrive then. A delivery bothy ended as denied must have met a revoke within that
 * slack. A registration the push service answered 410 has lost its right too: it must be removed,
 * and nothing sent to it after.
 */
import type * as History from "../History.ts"
import * as World from "../World.ts"
import type { Ledger, RegistrationFacts, SubscriptionFacts } from "./Ledger.ts"
import * as Tally from "./Tally.ts"

export const family = ["denied_but_delivered", "wrongly_denied", "sent_after_gone"] as const

const windowsOf = (history: History.History, principal: string, action: string, space: string) =>
  history.grantWindows.filter(
    (w) => w.grant.principal === principal && w.grant.action === action && w.grant.space === space,
  )

/** Surely revoked all through [from, to]. */
const surelyRevoked = (windows: ReadonlyArray<History.GrantWindow>, from: number, to: number) =>
  windows.some((w) => w.revokeTo <= from && to <= w.restoreFrom)

/** Possibly revoked at some time in [from, to]. */
const maybeRevoked = (windows: ReadonlyArray<History.GrantWindow>, from: number, to: number) =>
  windows.some((w) => w.revokeFrom <= to && from <= w.restoreTo)

const iso = (t: number) => new Date(t).toISOString()

const webhooks = (tally: Tally.Tally, s: SubscriptionFacts, ledger: Ledger) => {
  const slack = ledger.options.webhookSlackMillis
  const windows = (space: string) => windowsOf(ledger.run.history, s.plan.owner, World.webhookAction, space)
  for (const { arrival: a, event: e } of s.received)
    if (e !== undefined && surelyRevoked(windows(e.space), a.at - slack, a.at))
      Tally.add(tally, "denied_but_delivered", `${s.plan.name} ${a.key} at ${iso(a.at)}`)
  for (const { event: e, row, fate } of s.owed) {
    const at = row?.finished?.getTime() ?? 0
    if (fate === "denied" && !maybeRevoked(windows(e.space), at - slack, at))
      Tally.add(tally, "wrongly_denied", `${s.plan.name}: seq ${e.seq} denied at ${row?.finished?.toISOString()}`)
  }
}

const push = (tally: Tally.Tally, r: RegistrationFacts, ledger: Ledger) => {
  const slack = ledger.options.pushSlackMillis
  const name = r.registration.name
  const windows = (space: string) => windowsOf(ledger.run.history, r.plan.principal, World.pushAction, space)
  if (
    r.doomed &&
    (r.goneAt === undefined || r.removedAt === undefined || ledger.recorded.registered.has(r.registration.id))
  )
    Tally.add(
      tally,
      "sent_after_gone",
      `${name}: the 410 ${r.goneAt === undefined ? "never came" : "left the registration in place"}`,
    )
  for (const { arrival: a, event: e } of r.received) {
    if (r.removedAt !== undefined && a.at > r.removedAt + slack)
      Tally.add(tally, "sent_after_gone", `${name}: ${a.id} at ${iso(a.at)}`)
    if (e !== undefined && surelyRevoked(windows(e.space), a.at - slack, a.at))
      Tally.add(tally, "denied_but_delivered", `push ${name} ${a.id} at ${iso(a.at)}`)
  }
  for (const { event: e, job, fate } of r.owed) {
    const at = job?.finalized?.getTime() ?? 0
    if (fate === "denied" && !maybeRevoked(windows(e.space), at - slack, at))
      Tally.add(tally, "wrongly_denied", `push ${name}: seq ${e.seq} denied at ${job?.finalized?.toISOString()}`)
  }
}

export const judge = (ledger: Ledger): Tally.Tally => {
  const tally = Tally.make()
  for (const s of ledger.subscriptions) webhooks(tally, s, ledger)
  for (const r of ledger.registrations) push(tally, r, ledger)
  return tally
}
