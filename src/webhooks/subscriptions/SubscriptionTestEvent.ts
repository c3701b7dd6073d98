/**
 * "Send a test event": an event of the built-in type `bothy.subscription.test` (`TestEvent`)
 * appended to the log for one subscription, which then delivers it as it delivers any event (its
 * next `sequence`, signed, in order behind what is pending), so its owner sees the whole way work.
 *
 * Its space is the lowest of the subscription's scope: an event needs a space, and the owner's
 * right on that space is checked at delivery as for any event (without it the delivery goes dead,
 * `permission`, as it would for a real one). Only the named subscription takes it
 * (`SubscriptionRows.takesSql`), whatever its types and filter; push notifies nobody of it. Its
 * payload and catalog entry are with the other built-in types, in `OperationalEvents`.
 */
import { Effect, Schema } from "effect"
import { SqlClient } from "effect/sql"
import type { NewEvent } from "../../log/Event.ts"
import { EventLog } from "../../log/EventLog.ts"
import { testEventType } from "../../log/TestEvent.ts"
import * as OperationalEvents from "./OperationalEvents.ts"
import { selectSubscription } from "./SubscriptionRows.ts"

export type { TestEventPayload } from "./OperationalEvents.ts"

/** The subscription's scope holds no space: a test event would have none to be committed in. */
export class TestEventNeedsScope extends Schema.TaggedError<TestEventNeedsScope>()("TestEventNeedsScope", {
  subscription: Schema.String,
}) {
  override get message() {
    return `webhook subscription ${this.subscription} has no space in its scope: add one to send it a test event`
  }
}

/** What sending one did: the event's seq once committed, and the space it was committed in. */
export interface TestEventSent {
  readonly seq: bigint
  readonly space: string
  readonly type: typeof testEventType
}

/**
 * Appends the test event for subscription `id`, asked for by `requestedBy`, and waits for its seq;
 * undefined when there is no such subscription.
 */
export const send = Effect.fn("SubscriptionTestEvent.send")(function* (id: string, requestedBy: string) {
  const sql = yield* SqlClient.SqlClient
  const log = yield* EventLog
  const subscription = yield* selectSubscription(sql, id)
  if (subscription === undefined) return undefined
  // The scope comes in space order.
  const space = subscription.scope[0]
  if (space === undefined) return yield* new TestEventNeedsScope({ subscription: id })
  const payload: OperationalEvents.TestEventPayload = { subscription: id, owner: subscription.owner, requestedBy }
  const event: NewEvent = { space, type: testEventType, actor: OperationalEvents.actor, payload: { ...payload } }
  const appended = yield* log.append([event]).pipe(
    // bothy's own payload is valid by construction: a refusal is a defect, not the caller's error.
    Effect.catchTag("InvalidEvent", (e) => Effect.die(e)),
  )
  // Appended outside any transaction, so committed: not finding it is a defect.
  const sequenced = yield* log.sequenced(appended).pipe(Effect.catchTag("AppendNotCommitted", (e) => Effect.die(e)))
  return { seq: sequenced.firstSeq, space, type: testEventType } satisfies TestEventSent
})
