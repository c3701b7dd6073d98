/**
 * What a bulk recovery selects: deliveries of any number of subscriptions, by owner, subscription
 * ids, event types (exact or patterns, as a subscription names them), states and a creation time
 * range, and the SQL condition that selects them.
 *
 * What it keeps true: a filter is checked whole before anything is written, and a bad one is an
 * `InvalidRecoveryFilter` naming the field (`states[1]`, `until`, `subscriptions[0]`). A filter
 * with no selector at all (no owner, subscription, event type or time) would resend across every
 * tenant: it is refused (`TooBroad`) unless it says `all: true`, so a forgotten flag never turns
 * into a recovery of the whole installation.
 *
 * States, as a recovery means them:
 * - `failed`: dead because the subscription was disabled or re-enabled past it (`disabled:<cause>`,
 *   `stale`), the deliveries the one-subscription `recover` sends again; the default;
 * - `dead`: every dead delivery, those suppressed for a right or the scope included (the right is
 *   checked again when it goes out);
 * - `delivered`: sent again although the receiver took it;
 * - `pending`: only for a replay (a pending delivery is its drainer's already).
 */
import { Schema } from "effect"
import type { SqlClient, Statement } from "effect/sql"
import { isUuid } from "../../platform/Uuid.ts"
import { EventTypeOrPattern, likePattern } from "./EventTypePatterns.ts"

export const recoveryStates = ["failed", "dead", "delivered", "pending"] as const
export type RecoveryState = (typeof recoveryStates)[number]

/** The most subscription ids or event types one filter lists. */
export const maxListed = 1000

export interface RecoveryFilter {
  readonly owner?: string | undefined
  readonly subscriptions?: ReadonlyArray<string> | undefined
  readonly eventTypes?: ReadonlyArray<string> | undefined
  /** Absent: `failed` (a replay: every state). */
  readonly states?: ReadonlyArray<string> | undefined
  /** Deliveries created at or after this time. */
  readonly since?: Date | undefined
  /** Deliveries created before this time. */
  readonly until?: Date | undefined
  /** Says that a filter with no selector means every delivery of every subscription. */
  readonly all?: boolean | undefined
}

/** A checked filter, as it is stored with the recovery (times as ISO text). */
export const StoredFilter = Schema.Struct({
  owner: Schema.NullOr(Schema.String),
  subscriptions: Schema.Array(Schema.String),
  eventTypes: Schema.Array(Schema.String),
  states: Schema.Array(Schema.Literals(recoveryStates)),
  since: Schema.NullOr(Schema.String),
  until: Schema.NullOr(Schema.String),
  all: Schema.Boolean,
})
export type StoredFilter = typeof StoredFilter.Type

const reasons = {
  UnknownState: "is not a state a recovery selects",
  InvertedRange: "is not after since",
  TooBroad: "selects every delivery of every subscription",
  BadValue: "is not valid",
} as const

export class InvalidRecoveryFilter extends Schema.TaggedError<InvalidRecoveryFilter>()("InvalidRecoveryFilter", {
  /** The offending field (`states[1]`, `until`), or empty for the filter as a whole. */
  field: Schema.String,
  reason: Schema.Literals(Object.keys(reasons) as Array<keyof typeof reasons>),
  detail: Schema.String,
}) {
  override get message() {
    return `invalid recovery filter${this.field === "" ? "" : ` at ${this.field}`}: ${this.detail}`
  }
}

const refuse = (field: string, reason: InvalidRecoveryFilter["reason"], detail: string) =>
  new InvalidRecoveryFilter({ field, reason, detail })

const validTime = (d: Date | undefined) => d === undefined || !Number.isNaN(d.getTime())

const checkLists = (filter: RecoveryFilter): InvalidRecoveryFilter | undefined => {
  const subscriptions = filter.subscriptions ?? []
  const types = filter.eventTypes ?? []
  if (subscriptions.length > maxListed) return refuse("subscriptions", "BadValue", `lists more than ${maxListed}`)
  if (types.length > maxListed) return refuse("eventTypes", "BadValue", `lists more than ${maxListed}`)
  const badId = subscriptions.findIndex((id) => !isUuid(id))
  if (badId >= 0) return refuse(`subscriptions[${badId}]`, "BadValue", `${subscriptions[badId]} is not a UUID`)
  const isType = Schema.is(EventTypeOrPattern)
  const badType = types.findIndex((t) => !isType(t))
  if (badType >= 0) {
    return refuse(`eventTypes[${badType}]`, "BadValue", `${types[badType]} is no event type or pattern (order.*)`)
  }
  if (filter.owner !== undefined && (filter.owner === "" || filter.owner.length > 200)) {
    return refuse("owner", "BadValue", "must be 1 to 200 characters")
  }
  return undefined
}

const checkStates = (states: ReadonlyArray<string>, replay: boolean): InvalidRecoveryFilter | undefined => {
  const known = new Set<string>(recoveryStates)
  const i = states.findIndex((s) => !known.has(s) || (s === "pending" && !replay))
  if (i < 0) return undefined
  return states[i] === "pending"
    ? refuse(`states[${i}]`, "UnknownState", "pending deliveries go out already: only a replay copies them")
    : refuse(`states[${i}]`, "UnknownState", `${states[i]} ${reasons.UnknownState} (${recoveryStates.join(", ")})`)
}

/**
 * The filter checked and in its stored form, or why not. `replay`: the filter picks the range of
 * one subscription to copy to another (`pending` is allowed, and every state is the default).
 */
export const check = (filter: RecoveryFilter, replay: boolean): InvalidRecoveryFilter | StoredFilter => {
  const listed = checkLists(filter)
  if (listed !== undefined) return listed
  const states = filter.states ?? (replay ? recoveryStates : ["failed"])
  if (states.length === 0) return refuse("states", "UnknownState", "lists no state")
  const stateIssue = checkStates(states, replay)
  if (stateIssue !== undefined) return stateIssue
  if (!validTime(filter.since)) return refuse("since", "BadValue", "is not a time")
  if (!validTime(filter.until)) return refuse("until", "BadValue", "is not a time")
  if (filter.since !== undefined && filter.until !== undefined && filter.until <= filter.since) {
    return refuse(
      "until",
      "InvertedRange",
      `${filter.until.toISOString()} ${reasons.InvertedRange} (${filter.since.toISOString()})`,
    )
  }
  const selects =
    filter.owner !== undefined ||
    (filter.subscriptions ?? []).length > 0 ||
    (filter.eventTypes ?? []).length > 0 ||
    filter.since !== undefined ||
    filter.until !== undefined
  if (!selects && filter.all !== true) {
    return refuse(
      "",
      "TooBroad",
      `${reasons.TooBroad}: name an owner, subscriptions, event types or a time, or say all: true (--all)`,
    )
  }
  return {
    owner: filter.owner ?? null,
    subscriptions: [...(filter.subscriptions ?? [])],
    eventTypes: [...(filter.eventTypes ?? [])],
    states: [...new Set(states as ReadonlyArray<RecoveryState>)],
    since: filter.since?.toISOString() ?? null,
    until: filter.until?.toISOString() ?? null,
    all: filter.all === true,
  }
}

const stateCondition = (sql: SqlClient.SqlClient, state: RecoveryState) => {
  switch (state) {
    case "failed":
      return sql`(d.state = 'dead' AND (d.dead_reason LIKE 'disabled:%' OR d.dead_reason = 'stale'))`
    case "dead":
      return sql`d.state = 'dead'`
    case "delivered":
      return sql`d.state = 'delivered'`
    case "pending":
      return sql`d.state = 'pending'`
  }
}

/** The filter's states as a condition on the delivery `d`. */
export const statesSql = (sql: SqlClient.SqlClient, filter: StoredFilter) =>
  sql.or(filter.states.map((s) => stateCondition(sql, s)))

/**
 * The filter as a condition on the delivery `d`, its subscription `s` and, when the filter names
 * event types, its event `e` (the caller joins it: `EventLog.eventAt`).
 */
export const whereSql = (sql: SqlClient.SqlClient, filter: StoredFilter): Statement.Fragment =>
  sql.and([
    filter.owner === null ? sql`true` : sql`s.owner = ${filter.owner}`,
    filter.subscriptions.length === 0 ? sql`true` : sql`d.subscription_id = ANY(${filter.subscriptions}::uuid[])`,
    filter.eventTypes.length === 0
      ? sql`true`
      : sql`e.type LIKE ANY(${filter.eventTypes.map((t) => (t === "*" ? "%" : likePattern(t)))}::text[])`,
    filter.since === null ? sql`true` : sql`d.created_at >= ${new Date(filter.since)}`,
    filter.until === null ? sql`true` : sql`d.created_at < ${new Date(filter.until)}`,
    statesSql(sql, filter),
  ])
