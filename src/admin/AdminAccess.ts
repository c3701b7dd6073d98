/**
 * What a caller may see and change. The operator: everything. A principal: its own subscriptions
 * (owner) and registrations (principal), and only subscriptions whose spaces it may receive
 * (`webhook_out.deliver` through `Permissions`); consumers and jobs are the operator's alone.
 *
 * What it keeps true: another's subscription, delivery or registration is answered exactly as one
 * that does not exist (its not-found error, a 404), so a principal cannot learn which ids exist.
 */
import { Effect } from "effect"
import { Permissions, webhookDeliver } from "../authz/Permissions.ts"
import { isStorable } from "../platform/StorableText.ts"
import {
  type Subscription,
  SubscriptionNotFound,
  type WebhookSubscriptions,
} from "../webhooks/subscriptions/WebhookSubscriptions.ts"
import type { Caller } from "./AdminAuth.ts"
import { NotPermitted, OperatorOnly } from "./AdminErrors.ts"

/** Whether `caller` may see what belongs to `principal`. */
export const owns = (caller: Caller, principal: string): boolean =>
  caller._tag === "Operator" || caller.principal === principal

/** The subscription `id`, if `caller` may see it; another's is `SubscriptionNotFound`. */
export const subscription = (webhooks: WebhookSubscriptions["Service"], caller: Caller, id: string) =>
  Effect.flatMap(
    webhooks.get(id),
    (s): Effect.Effect<Subscription, SubscriptionNotFound> =>
      owns(caller, s.owner) ? Effect.succeed(s) : Effect.fail(new SubscriptionNotFound({ id })),
  )

/**
 * Who a new subscription or registration belongs to: what the operator names, or the principal
 * itself (which may not name another).
 */
export const ownerFor = (caller: Caller, requested: string | undefined, field: string) =>
  caller._tag === "Operator"
    ? Effect.succeed(requested ?? "")
    : requested === undefined || requested === caller.principal
      ? Effect.succeed(caller.principal)
      : Effect.fail(new NotPermitted({ field, detail: `${caller.principal} may not act for another principal` }))

/** For a principal, every space of `scope` must be one it may receive; the operator is not asked. */
export const checkScope = (caller: Caller, scope: ReadonlyArray<string> | undefined) =>
  Effect.gen(function* () {
    if (caller._tag === "Operator" || scope === undefined) return
    // Spaces that are no valid text are `WebhookSubscriptions`' to refuse, with the field named.
    const asked = scope.flatMap((space, index) =>
      space.length > 0 && space.length <= 200 && isStorable(space) ? [{ space, index }] : [],
    )
    if (asked.length === 0) return
    const answers = yield* (yield* Permissions).allowedEach(
      asked.map(({ space }) => ({ principal: caller.principal, action: webhookDeliver, spaceId: space })),
    )
    const denied = asked.find((_, i) => answers[i] !== true)
    if (denied !== undefined) {
      return yield* new NotPermitted({
        field: `scope[${denied.index}]`,
        detail: `${caller.principal} may not receive events of space ${denied.space} (${webhookDeliver})`,
      })
    }
  })

export const operatorOnly = (caller: Caller, what: string) =>
  caller._tag === "Operator" ? Effect.void : Effect.fail(new OperatorOnly({ detail: what }))
