/**
 * "Send a test event": an event of the built-in type `bothy.subscription.test` (`TestEvent`)
 * appended to the log for one subscription, which then delivers it as it delivers any event (its
 * next `sequence`, signed, in order behind what is pending), so its owner sees the whole way work.
 *
 * Its space is the lowest of the subscription's scope: an event needs a space, and the owner's
 * right on that space is checked at delivery as for any event (without it the delivery goes dead,
 * `permission`, as it would for a real one). Only the named subscription takes it
 * (`SubscriptionRows.takesSql`), whatever its types and filter; push notifies nobody of it.
 */
import { Effect, Schema } from "effect"
import { SqlClient } from "effect/sql"
import type { NewEvent } from "../../log/Event.ts"
import { EventLog } from "../../log/EventLog.ts"
import type { EventTypeEntry } from "../../log/EventTypeCatalog.ts"
import { testEventType } from "../../log/TestEvent.ts"

/** The subscription's scope holds no space: a test event would have none to be committed in. */
export class TestEventNeedsScope extends Schema.TaggedError<TestEventNeedsScope>()("TestEventNeedsScope", {
  subscription: Schema.String,
}) {
  override get message() {
    return `webhook subscription ${this.subscription} has no space in its scope: add one to send it a test event`
  }
}

/** The test event's payload. */
export interface TestEventPayload {
  readonly subscription: string
  readonly owner: string
  /** Who asked: a principal, or `operator`. */
  readonly requestedBy: string
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
  const [row] = yield* sql<{ owner: string; space: string | null }>`
    SELECT s.owner, (SELECT min(space_id) FROM webhook_subscription_spaces WHERE subscription_id = s.id) AS space
    FROM webhook_subscriptions AS s WHERE s.id = ${id}::uuid`
  if (row === undefined) return undefined
  if (row.space === null) return yield* new TestEventNeedsScope({ subscription: id })
  const payload: TestEventPayload = { subscription: id, owner: row.owner, requestedBy }
  const event: NewEvent = { space: row.space, type: testEventType, actor: "bothy", payload: { ...payload } }
  const appended = yield* log.append([event]).pipe(
    // bothy's own payload is valid by construction: a refusal is a defect, not the caller's error.
    Effect.catchTag("InvalidEvent", (e) => Effect.die(e)),
  )
  // Appended outside any transaction, so committed: not finding it is a defect.
  const sequenced = yield* log.sequenced(appended).pipe(Effect.catchTag("AppendNotCommitted", (e) => Effect.die(e)))
  return { seq: sequenced.firstSeq, space: row.space, type: testEventType } satisfies TestEventSent
})

const example: TestEventPayload = {
  subscription: "0190a5c4-8d2e-7b3a-9c1f-3e5d7a9b1c2d",
  owner: "acme",
  requestedBy: "acme",
}

/** The type's catalog entry (a built-in, listed with the operational types). */
export const catalogEntry: EventTypeEntry = {
  name: testEventType,
  description:
    "A test event the subscription's owner (or the operator) asked for, from the console or POST /v1/subscriptions/{id}/test-event. Sent only to that subscription, whatever its event types and filter, in the lowest space of its scope, under its next sequence number. Nobody is notified of it by push.",
  schema: {
    type: "object",
    required: ["subscription", "owner", "requestedBy"],
    properties: {
      subscription: { type: "string", format: "uuid", description: "the subscription it is sent to" },
      owner: { type: "string", description: "the subscription's owner principal" },
      requestedBy: { type: "string", description: "who asked for it: a principal, or operator" },
    },
  },
  example: example as never,
  deprecated: false,
  validated: false,
}
