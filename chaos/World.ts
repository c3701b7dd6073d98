/**
 * The tenants of a chaos run, drawn from the seed: spaces, event types and actors; webhook
 * subscriptions (an owner, a scope of spaces, sometimes a type filter), two of them "gap"
 * subscriptions that begin before the old events retention will take; push principals (members of
 * some spaces, some with mutes) with their browser registrations, one of them doomed to a 410; and
 * the grants every owner and principal starts with. Only names here: `Tenants` writes them.
 */
import type * as SeededRandom from "./SeededRandom.ts"

export const eventTypes = ["item.created", "item.updated", "item.deleted", "comment.added"] as const

/** The space of the old events that retention detaches while the consumers are behind. */
export const oldSpace = "old"

export interface SubscriptionPlan {
  readonly name: string
  readonly owner: string
  readonly scope: ReadonlyArray<string>
  /** Empty: every type. */
  readonly eventTypes: ReadonlyArray<string>
  /** Created before the old events, so their loss must disable it with cause `gap`. */
  readonly gap: boolean
}

export interface Mute {
  readonly space?: string
  readonly type?: string
}

export interface PrincipalPlan {
  readonly principal: string
  readonly spaces: ReadonlyArray<string>
  readonly mutes: ReadonlyArray<Mute>
  /** Names of its registrations (browser subscriptions). */
  readonly registrations: ReadonlyArray<string>
}

export interface Grant {
  readonly principal: string
  readonly action: string
  readonly space: string
}

export interface World {
  readonly spaces: ReadonlyArray<string>
  readonly actors: ReadonlyArray<string>
  readonly subscriptions: ReadonlyArray<SubscriptionPlan>
  readonly principals: ReadonlyArray<PrincipalPlan>
  /** The registration the push service answers 410 (it must be removed, and nothing sent to it after). */
  readonly doomed: string
  readonly grants: ReadonlyArray<Grant>
}

export const webhookAction = "webhook_out.deliver"
export const pushAction = "push.deliver"

export const make = (random: SeededRandom.SeededRandom): World => {
  const spaces = Array.from({ length: 24 }, (_, i) => `s${String(i).padStart(2, "0")}`)
  const owners = Array.from({ length: 5 }, (_, i) => `owner-${i}`)
  const subscriptions: Array<SubscriptionPlan> = []
  for (let i = 0; i < 10; i++) {
    subscriptions.push({
      name: `w${i}`,
      owner: owners[i % owners.length]!,
      scope: random.sample(spaces, random.int(2, 4)).sort(),
      eventTypes: random.chance(0.4) ? random.sample(eventTypes, random.int(1, 2)).sort() : [],
      gap: false,
    })
  }
  for (let i = 0; i < 2; i++) {
    subscriptions.push({
      name: `gap${i}`,
      owner: owners[i]!,
      scope: [oldSpace, ...random.sample(spaces, 2).sort()],
      eventTypes: [],
      gap: true,
    })
  }
  const principals: Array<PrincipalPlan> = []
  for (let i = 0; i < 5; i++) {
    const mine = random.sample(spaces, random.int(2, 4)).sort()
    const mutes: Array<Mute> = []
    if (random.chance(0.4)) mutes.push({ space: random.pick(mine) })
    if (random.chance(0.3)) mutes.push({ type: random.pick(eventTypes) })
    principals.push({
      principal: `user-${i}`,
      spaces: mine,
      mutes,
      registrations: Array.from({ length: i === 0 ? 2 : 1 }, (_, k) => `u${i}r${k}`),
    })
  }
  // Producers act as some of the principals too: the audience leaves an event's actor out.
  const actors = [...Array.from({ length: 4 }, (_, i) => `actor-${i}`), "user-1", "user-2"]
  const grants: Array<Grant> = []
  for (const s of subscriptions)
    for (const space of s.scope) grants.push({ principal: s.owner, action: webhookAction, space })
  for (const p of principals)
    for (const space of p.spaces) grants.push({ principal: p.principal, action: pushAction, space })
  const unique = [...new Map(grants.map((g) => [`${g.principal} ${g.action} ${g.space}`, g])).values()]
  return { spaces, actors, subscriptions, principals, doomed: "u0r1", grants: unique }
}
