/**
 * Operational events: what bothy tells a subscription's owner about the subscription, as ordinary
 * events of its own log (`bothy.*` types), so the owner receives them through a subscription of
 * their own with every guarantee an event has (ordered, signed, exactly once, the right checked at
 * delivery).
 *
 * What it keeps true:
 * - one exists exactly when the change it reports happened: `append` is called inside the
 *   transaction that makes the change (disable, degrade, recover, a delivery's death without a
 *   request), so a rollback leaves neither;
 * - its space is the owner principal, so it reaches the owner's subscriptions whose scope holds
 *   their own principal (and whose owner holds `webhook_out.deliver` on it), and nobody else's
 *   unless the host grants it;
 * - it never reaches the subscription it is about: the round's match (`SubscriptionRows.takesSql`)
 *   leaves out an event whose `subscription` is the candidate's id, in SQL, so nothing loops.
 *
 * The types are built in: the catalog lists them always (`catalogEntries`), with their schemas and
 * examples, and does not count them when it decides whether it is "on".
 */
import { Effect } from "effect"
import type { NewEvent } from "../../log/Event.ts"
import { EventLog } from "../../log/EventLog.ts"
import type { EventTypeEntry } from "../../log/EventTypeCatalog.ts"
import { testEventType } from "../../log/TestEvent.ts"
import type * as WebhookMetrics from "../WebhookMetrics.ts"

/** A disable's cause (`SubscriptionStates.DisabledCause`; named from its source to keep imports one way). */
type DisabledCause = (typeof WebhookMetrics.disabledCauses)[number]

/** The prefix of every operational event type (a subscription filters for them with `bothy.*`). */
export const prefix = "bothy."

export const subscriptionDisabled = "bothy.subscription.disabled"
export const subscriptionDegraded = "bothy.subscription.degraded"
export const subscriptionRecovered = "bothy.subscription.recovered"
export const deliveryDead = "bothy.delivery.dead"

/** The actor of every operational event. */
export const actor = "bothy"

/** What a disable reports, beside the subscription and its owner. */
export interface Disabled {
  readonly subscription: string
  readonly owner: string
  readonly cause: DisabledCause
  /** Pending deliveries the disable ended (dead with reason `disabled:<cause>`). */
  readonly deliveriesEnded: number
  /** When the subscription's streak of failures began; null when it was not failing. */
  readonly failingSince: string | null
  /** The last answer's HTTP status, when a request caused the disable (`gone`, `failing`). */
  readonly lastStatus: number | null
  /** The last request's error class (`timeout`, `connect`, ...), when it got no answer. */
  readonly lastError: string | null
}

/**
 * What a delivery that went dead on its own reports: one that was never sent because, at its turn,
 * the owner had no right on its space or the space had left the subscription's scope. Deliveries
 * ended by a disable are counted in that disable's event (`deliveriesEnded`) instead.
 */
export interface DeadDelivery {
  readonly subscription: string
  readonly owner: string
  /** The delivery's id (what the admin API and `resend` name it by). */
  readonly delivery: string
  /** The seq of its event in the log (a string: a seq is a 64-bit integer). */
  readonly eventSeq: string
  /** The event's space: the one the owner may not read, or that left the scope. */
  readonly space: string
  readonly reason: "permission" | "scope"
}

/** What a test event (`SubscriptionTestEvent`) carries, beside its type `bothy.subscription.test`. */
export interface TestEventPayload {
  readonly subscription: string
  readonly owner: string
  /** Who asked: a principal, or `operator`. */
  readonly requestedBy: string
}

/** The figures of a change of health: the failure rate over the window, as the threshold was judged. */
export interface Health {
  readonly subscription: string
  readonly owner: string
  /** Failed attempts over attempts in the window, 0 to 1. */
  readonly failureRate: number
  readonly attempts: number
  readonly failures: number
  readonly windowSeconds: number
  readonly threshold: number
  readonly lastStatus: number | null
}

const event = (owner: string, type: string, payload: object): NewEvent => ({
  space: owner,
  type,
  actor,
  payload: payload as NewEvent["payload"],
})

export const disabledEvent = (d: Disabled) => event(d.owner, subscriptionDisabled, d)

export const deadDeliveryEvent = (d: DeadDelivery) => event(d.owner, deliveryDead, d)

/**
 * Whether a delivery of an event of `type` that goes dead reports it. Not when the event is itself
 * an operational one: two subscriptions of an owner that may not read their own space would
 * otherwise report each other's dead reports to each other without end.
 */
export const reportsDeath = (type: string | null) => type !== null && !type.startsWith(prefix)

export const healthEvent = (type: typeof subscriptionDegraded | typeof subscriptionRecovered, h: Health) =>
  event(h.owner, type, h)

/**
 * Appends `events` with the `EventLog` in context, inside the caller's transaction (the log's
 * `append` runs on the transaction's connection). In `counter` mode it takes the log's commit
 * lock: call it as the transaction's last statement where there is a choice.
 */
export const append = (events: ReadonlyArray<NewEvent>) =>
  events.length === 0
    ? Effect.void
    : Effect.flatMap(EventLog, (log) =>
        log.append(events).pipe(
          // bothy's own payloads are valid by construction: a refusal is a defect, not the caller's error.
          Effect.catchTag("InvalidEvent", (e) => Effect.die(e)),
          Effect.asVoid,
        ),
      )

const figures = {
  subscription: { type: "string", format: "uuid", description: "the subscription the event is about" },
  owner: { type: "string", description: "the subscription's owner principal (also the event's space)" },
} as const

const disabledExample: Disabled = {
  subscription: "0190a5c4-8d2e-7b3a-9c1f-3e5d7a9b1c2d",
  owner: "acme",
  cause: "failing",
  deliveriesEnded: 42,
  failingSince: "2026-12-01T08:00:00.000Z",
  lastStatus: 503,
  lastError: null,
}

const healthExample: Health = {
  subscription: "0190a5c4-8d2e-7b3a-9c1f-3e5d7a9b1c2d",
  owner: "acme",
  failureRate: 0.8,
  attempts: 20,
  failures: 16,
  windowSeconds: 900,
  threshold: 0.5,
  lastStatus: 503,
}

const nullableInt = { type: ["integer", "null"] } as const

const deadExample: DeadDelivery = {
  subscription: "0190a5c4-8d2e-7b3a-9c1f-3e5d7a9b1c2d",
  owner: "acme",
  delivery: "81234",
  eventSeq: "4410297",
  space: "acme-billing",
  reason: "permission",
}

const healthSchema = {
  type: "object",
  required: [
    "subscription",
    "owner",
    "failureRate",
    "attempts",
    "failures",
    "windowSeconds",
    "threshold",
    "lastStatus",
  ],
  properties: {
    ...figures,
    failureRate: { type: "number", minimum: 0, maximum: 1, description: "failed attempts over attempts in the window" },
    attempts: { type: "number", minimum: 0, description: "attempts counted in the window (a weighted estimate)" },
    failures: { type: "number", minimum: 0, description: "failed attempts counted in the window" },
    windowSeconds: { type: "integer", minimum: 1 },
    threshold: { type: "number", minimum: 0, maximum: 1 },
    lastStatus: nullableInt,
  },
}

const testExample: TestEventPayload = {
  subscription: "0190a5c4-8d2e-7b3a-9c1f-3e5d7a9b1c2d",
  owner: "acme",
  requestedBy: "acme",
}

/** The test event's entry (`SubscriptionTestEvent` sends it). */
const testEntry: EventTypeEntry = {
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
  example: testExample as never,
  deprecated: false,
  validated: false,
}

/**
 * The built-in types as catalog entries (these and the test event's):
 * always listed, never written to the catalog's table.
 */
export const catalogEntries: ReadonlyArray<EventTypeEntry> = [
  {
    name: subscriptionDisabled,
    description:
      "bothy disabled one of the owner's webhook subscriptions (cause gap, gone, failing or manual); its pending deliveries ended dead. Sent in the owner's space, never to the subscription itself.",
    schema: {
      type: "object",
      required: ["subscription", "owner", "cause", "deliveriesEnded", "failingSince", "lastStatus", "lastError"],
      properties: {
        ...figures,
        cause: { enum: ["gap", "gone", "failing", "manual"] },
        deliveriesEnded: { type: "integer", minimum: 0 },
        failingSince: { type: ["string", "null"], format: "date-time" },
        lastStatus: nullableInt,
        lastError: { type: ["string", "null"] },
      },
    },
    example: disabledExample as never,
    deprecated: false,
    validated: false,
  },
  {
    name: subscriptionDegraded,
    description:
      "More of the subscription's attempts failed over the window than the threshold allows; it still delivers. Sent in the owner's space, never to the subscription itself.",
    schema: healthSchema,
    example: healthExample as never,
    deprecated: false,
    validated: false,
  },
  {
    name: subscriptionRecovered,
    description:
      "A degraded subscription's failure rate over the window fell below the threshold again. Sent in the owner's space, never to the subscription itself.",
    schema: healthSchema,
    example: { ...healthExample, failureRate: 0.2, failures: 4 } as never,
    deprecated: false,
    validated: false,
  },
  {
    name: deliveryDead,
    description:
      "A delivery of the subscription went dead without a request: at its turn the owner had no right on the event's space (reason permission) or the space had left the subscription's scope (reason scope). The event's type and payload are not repeated. Not sent for deliveries of bothy.* events, nor for those a disable ended (bothy.subscription.disabled counts them). Sent in the owner's space, never to the subscription itself.",
    schema: {
      type: "object",
      required: ["subscription", "owner", "delivery", "eventSeq", "space", "reason"],
      properties: {
        ...figures,
        delivery: { type: "string", pattern: "^[0-9]+$", description: "the delivery's id" },
        eventSeq: { type: "string", pattern: "^[0-9]+$", description: "the seq of its event in the log" },
        space: { type: "string", description: "the event's space" },
        reason: { enum: ["permission", "scope"] },
      },
    },
    example: deadExample as never,
    deprecated: false,
    validated: false,
  },
  testEntry,
]

/** The built-in type names. */
export const names = catalogEntries.map((e) => e.name)
