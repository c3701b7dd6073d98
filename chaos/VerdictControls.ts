/**
 * Negative controls for the verdict: copies of what the receivers recorded, each with one known
 * fault planted (an accepted webhook and an accepted push dropped, two first arrivals swapped, an
 * event accepted again under another webhook-id, a push forged in the middle of a revoke window),
 * so a run can show that its verdict counts each of them. A control whose ingredients the run did
 * not produce (no revoke window with a matching arrival, say) is left out.
 */
import type * as History from "./History.ts"
import type { PushReceiver } from "./PushReceiver.ts"
import type { Receiver } from "./Receiver.ts"

export interface Control {
  readonly name: string
  /** The verdict count that must come out above zero. */
  readonly counts: "lost" | "order_violations" | "doubled_effects" | "denied_but_delivered"
  readonly receiver: Receiver
  readonly push: PushReceiver
}

const accepted = (status: number) => status >= 200 && status < 300

export const make = (
  receiver: Receiver,
  push: PushReceiver,
  history: History.History,
  registrationsOf: (principal: string) => ReadonlyArray<string>,
): ReadonlyArray<Control> => {
  const controls: Array<Control> = []
  const withWebhooks = (
    name: string,
    counts: Control["counts"],
    arrivals: ReadonlyArray<Receiver["arrivals"][number]>,
  ) => controls.push({ name, counts, receiver: { ...receiver, arrivals }, push })
  const withPush = (
    name: string,
    counts: Control["counts"],
    arrivals: ReadonlyArray<PushReceiver["arrivals"][number]>,
  ) => controls.push({ name, counts, receiver, push: { ...push, arrivals } })

  const hooks = receiver.arrivals
  const victim = hooks.find((a) => a.verified && accepted(a.status))
  if (victim !== undefined)
    withWebhooks(
      "an accepted webhook dropped",
      "lost",
      hooks.filter((a) => a.webhookId !== victim.webhookId),
    )
  // Two consecutive first arrivals of one subscription, swapped.
  const firsts = hooks.filter((a, i) => a.verified && hooks.findIndex((b) => b.webhookId === a.webhookId) === i)
  const pair = firsts.findIndex((a, i) => firsts[i + 1]?.path === a.path)
  if (pair >= 0) {
    const swapped = [...hooks]
    const i = hooks.indexOf(firsts[pair]!)
    const j = hooks.indexOf(firsts[pair + 1]!)
    swapped[i] = hooks[j]!
    swapped[j] = hooks[i]!
    withWebhooks("two first arrivals swapped", "order_violations", swapped)
  }
  if (victim !== undefined)
    withWebhooks("an event accepted again under another webhook-id", "doubled_effects", [
      ...hooks,
      { ...victim, webhookId: `${victim.webhookId}-forged`, at: victim.at + 1 },
    ])

  const pushes = push.arrivals
  const pushVictim = pushes.find((a) => accepted(a.status))
  if (pushVictim !== undefined)
    withPush(
      "an accepted push dropped",
      "lost",
      pushes.filter((a) => !(a.registration === pushVictim.registration && a.id === pushVictim.id)),
    )
  for (const w of history.grantWindows) {
    if (w.grant.action !== "push.deliver" || !Number.isFinite(w.restoreFrom)) continue
    const mine = new Set(registrationsOf(w.grant.principal))
    const model = pushes.find((a) => mine.has(a.registration) && a.space === w.grant.space)
    if (model === undefined) continue
    withPush("a push forged inside a revoke window", "denied_but_delivered", [
      ...pushes,
      { ...model, at: Math.round((w.revokeTo + w.restoreFrom) / 2) },
    ])
    break
  }
  return controls
}
