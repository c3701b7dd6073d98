/**
 * Judges that nothing was made or had its effect twice: each producer key is in the log once,
 * each (event, subscription) has at most one delivery row and each (event, registration) at most
 * one push job, none exists for what its subscriber does not hear of, no stray event reaches a
 * receiver, a `webhook-id` never comes back with other content, and no event is accepted under two
 * `webhook-id`s (a receiver deduplicating by id would apply it twice).
 */
import type { Ledger, SubscriptionFacts } from "./Ledger.ts"
import * as Tally from "./Tally.ts"

export const family = ["duplicates_created", "doubled_effects"] as const

const webhooks = (tally: Tally.Tally, s: SubscriptionFacts, ledger: Ledger) => {
  const name = s.plan.name
  const rowSeqs = new Set<bigint>()
  for (const r of s.rows) {
    if (rowSeqs.has(r.seq)) Tally.add(tally, "duplicates_created")
    rowSeqs.add(r.seq)
    const e = ledger.bySeq.get(r.seq)
    if (e === undefined || !s.matches(e))
      Tally.add(tally, "duplicates_created", `${name}: a delivery row for seq ${r.seq}, which it does not match`)
  }
  const content = new Map<string, { key: string; sequence: number }>()
  for (const { arrival: a, event } of s.received) {
    if (event === undefined) {
      Tally.add(tally, "duplicates_created", `${name}: received ${a.key}, which it does not match`)
      continue
    }
    if (a.status < 200 || a.status >= 300) continue
    const known = content.get(a.webhookId)
    if (known !== undefined && (known.key !== a.key || known.sequence !== a.sequence))
      Tally.add(tally, "duplicates_created", `${name}: webhook-id ${a.webhookId} came with other content`)
    content.set(a.webhookId, { key: a.key, sequence: a.sequence })
  }
  for (const [key, ids] of s.acceptedIds)
    if (ids.size > 1) Tally.add(tally, "doubled_effects", `${name}: ${key} under ${[...ids].join(", ")}`)
}

export const judge = (ledger: Ledger): Tally.Tally => {
  const tally = Tally.make()
  Tally.add(tally, "duplicates_created", undefined, ledger.keysLoggedTwice)
  for (const s of ledger.subscriptions) webhooks(tally, s, ledger)
  for (const [k, list] of ledger.jobsByKey)
    if (list.length > 1) Tally.add(tally, "duplicates_created", `push job ${k} x${list.length}`, list.length - 1)
  for (const r of ledger.registrations)
    for (const j of r.jobs) {
      const e = ledger.bySeq.get(BigInt(j.seq))
      if (e === undefined || !r.hears(e))
        Tally.add(
          tally,
          "duplicates_created",
          `push job for ${r.registration.name} seq ${j.seq}, which its principal does not hear of`,
        )
    }
  return tally
}
