/**
 * Writes the world of a chaos run into its database through bothy's public services, in the order
 * the gap needs: the gap subscriptions first, then two events dated 10 and 11 days back (their day
 * partitions made for them), then every other subscription, so that only the gap subscriptions
 * began before the events retention will take. Push principals join their spaces, mute what the
 * world says, and register their browsers with the run's push service. Every grant is given.
 */
import { Effect, Redacted } from "effect"
import { SqlClient } from "effect/sql"
import * as PermissionGrants from "../src/authz/PermissionGrants.ts"
import * as PushAudience from "../src/push/PushAudience.ts"
import * as PushRegistrations from "../src/push/PushRegistrations.ts"
import { WebhookSubscriptions } from "../src/webhooks/subscriptions/WebhookSubscriptions.ts"
import * as OldEvents from "./OldEvents.ts"
import type { PushReceiver } from "./PushReceiver.ts"
import type { Receiver } from "./Receiver.ts"
import * as World from "./World.ts"

export interface Subscription {
  readonly plan: World.SubscriptionPlan
  readonly id: string
  /** The seq it began after (the head at its creation). */
  readonly startedSeq: bigint
}

export interface Registration {
  readonly name: string
  readonly principal: string
  readonly id: string
}

export interface Tenants {
  readonly subscriptions: ReadonlyArray<Subscription>
  readonly registrations: ReadonlyArray<Registration>
  /** The seqs of the old events, which retention takes while the consumers are behind. */
  readonly oldSeqs: ReadonlyArray<bigint>
}

const head = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const [row] = yield* sql<{ value: bigint }>`SELECT value FROM event_seq`
  return row!.value
})

export const write = (world: World.World, receiver: Receiver, push: PushReceiver) =>
  Effect.gen(function* () {
    const webhooks = yield* WebhookSubscriptions
    for (const g of world.grants) yield* PermissionGrants.grant(g.principal, g.action, g.space)
    const subscriptions: Array<Subscription> = []
    const create = (plan: World.SubscriptionPlan) =>
      Effect.gen(function* () {
        const startedSeq = yield* head
        const created = yield* webhooks.create({
          owner: plan.owner,
          url: receiver.url(plan.name),
          scope: plan.scope,
          eventTypes: plan.eventTypes,
        })
        receiver.trust(plan.name, Redacted.value(created.secret))
        subscriptions.push({ plan, id: created.id, startedSeq })
      })
    for (const plan of world.subscriptions.filter((s) => s.gap)) yield* create(plan)
    const now = Date.now()
    const oldSeqs = yield* OldEvents.append(
      [now - 11 * OldEvents.dayMillis, now - 10 * OldEvents.dayMillis],
      World.oldSpace,
    )
    for (const plan of world.subscriptions.filter((s) => !s.gap)) yield* create(plan)

    const registrations: Array<Registration> = []
    for (const p of world.principals) {
      for (const space of p.spaces) yield* PushAudience.join(space, p.principal)
      for (const mute of p.mutes) yield* PushAudience.mute(p.principal, mute as { space: string; type?: string })
      for (const name of p.registrations) {
        const registered = yield* PushRegistrations.register(p.principal, push.subscribe(name))
        registrations.push({ name, principal: p.principal, id: registered.id })
      }
    }
    return { subscriptions, registrations, oldSeqs } satisfies Tenants
  })
