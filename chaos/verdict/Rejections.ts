/**
 * Judges what the independent receivers refused: a webhook that failed Standard Webhooks
 * verification with its subscription's secret, or a push message whose VAPID token or encryption
 * the push service could not accept. Either means a receiver would have dropped it.
 */
import type { Ledger } from "./Ledger.ts"
import * as Tally from "./Tally.ts"

export const family = ["unverified_requests", "undecryptable_pushes"] as const

export const judge = (ledger: Ledger): Tally.Tally => {
  const tally = Tally.make()
  for (const s of ledger.subscriptions)
    for (const a of s.arrivals)
      if (!a.verified) Tally.add(tally, "unverified_requests", `${s.plan.name} ${a.webhookId}`)
  Tally.add(tally, "undecryptable_pushes", undefined, ledger.run.push.rejections.length)
  return tally
}
