/**
 * Who wants to hear of an event: the contract a host app implements, and the default model.
 *
 * The default (`layer`) is the members of the event's space (`space_members`) but its actor, less
 * those who muted that space, that event type, or that type in that space
 * (`notification_preferences`). Whoever may *receive* is a different question, asked again at
 * delivery time (`Permissions`, action `push.deliver`): wanting a notification is not a right to it.
 *
 * A batch of events is answered in one call (`recipients`: one statement for the default), never one
 * query per event. `inSql` is an optimisation, as `Permissions.inSql` is: where the audience lives in
 * bothy's own database, the `push` round reads events, audience and registrations in one statement.
 * A host whose audience lives elsewhere gives only `recipients`.
 */
import { type Array as Arr, Context, Effect, Layer, Schema } from "effect"
import { SqlClient, type Statement } from "effect/sql"
import type { Event } from "../log/Event.ts"
import { pgFailure } from "../platform/PgError.ts"

/** One principal to notify of the event `seq`. */
export interface Recipient {
  readonly seq: bigint
  readonly principal: string
}

/** The audience could not be read (its store is down, the host's service refused, ...). */
export class PushAudienceUnavailable extends Schema.TaggedError<PushAudienceUnavailable>()("PushAudienceUnavailable", {
  /** Who was asked, e.g. `space_members` or a host's service. */
  source: Schema.String,
  /** How many events the failed call held. */
  events: Schema.Number,
  detail: Schema.String,
}) {
  override get message() {
    return `cannot read the push audience of ${this.events} event(s) from ${this.source}: ${this.detail}`
  }
}

export interface PushAudienceShape {
  readonly recipients: (
    events: Arr.NonEmptyReadonlyArray<Event>,
  ) => Effect.Effect<ReadonlyArray<Recipient>, PushAudienceUnavailable>
  /**
   * The same answer as a SELECT of `(seq bigint, principal text)` over the CTE
   * `ev (seq, space, type, epoch, trace_parent, actor)`, at the statement's snapshot.
   */
  readonly inSql?: (sql: SqlClient.SqlClient) => Statement.Fragment
}

export class PushAudience extends Context.Service<PushAudience, PushAudienceShape>()("bothy/PushAudience") {}

/** The default model over `ev`: members but the actor, less those who muted the space or the type. */
const membersSql = (sql: SqlClient.SqlClient) => sql`
  SELECT e.seq, m.principal
  FROM ev AS e
  JOIN space_members AS m ON m.space_id = e.space
  WHERE m.principal <> e.actor
    AND NOT EXISTS (
      SELECT 1 FROM notification_preferences AS p
      WHERE p.principal = m.principal
        AND (p.space_id IS NULL OR p.space_id = e.space)
        AND (p.event_type IS NULL OR p.event_type = e.type)
    )`

/** The default audience, from `space_members` and `notification_preferences`. */
/** The audiences this layer made, so `isModel` recognises them. */
const made = new WeakSet<object>()

/** Whether `audience` is the default model's (a host's own `PushAudience` is not). */
export const isModel = (audience: PushAudienceShape): boolean => made.has(audience)

export const layer = Layer.effect(
  PushAudience,
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const audience = PushAudience.of({
      recipients: (events) =>
        sql<Recipient>`
          WITH ev AS (
            SELECT * FROM unnest(${events.map((e) => e.seq.toString())}::bigint[], ${events.map((e) => e.space)}::text[],
                                 ${events.map((e) => e.type)}::text[], ${events.map((e) => e.actor)}::text[])
                          AS ev(seq, space, type, actor)
          )
          ${membersSql(sql)}
          ORDER BY 1, 2`.pipe(
          Effect.mapError(
            (e) =>
              new PushAudienceUnavailable({
                source: "space_members",
                events: events.length,
                detail: pgFailure(e).message,
              }),
          ),
        ),
      inSql: membersSql,
    })
    made.add(audience)
    return audience
  }),
)

/** Adds `principal` to `space` (the default model's membership). */
export const join = Effect.fn("PushAudience.join")(function* (space: string, principal: string) {
  const sql = yield* SqlClient.SqlClient
  yield* sql`INSERT INTO space_members (space_id, principal) VALUES (${space}, ${principal}) ON CONFLICT DO NOTHING`
})

export const leave = Effect.fn("PushAudience.leave")(function* (space: string, principal: string) {
  const sql = yield* SqlClient.SqlClient
  yield* sql`DELETE FROM space_members WHERE space_id = ${space} AND principal = ${principal}`
})

/**
 * Mutes, for `principal`, a space (`{ space }`), an event type everywhere (`{ type }`), or a type in
 * a space (both).
 */
export const mute = Effect.fn("PushAudience.mute")(function* (
  principal: string,
  what: { readonly space: string; readonly type?: string } | { readonly space?: string; readonly type: string },
) {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    INSERT INTO notification_preferences (principal, space_id, event_type)
    VALUES (${principal}, ${what.space ?? null}, ${what.type ?? null}) ON CONFLICT DO NOTHING`
})

/** Lifts a mute `mute` made (the same space and type, either absent). */
export const unmute = Effect.fn("PushAudience.unmute")(function* (
  principal: string,
  what: { readonly space?: string | undefined; readonly type?: string | undefined },
) {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    DELETE FROM notification_preferences
    WHERE principal = ${principal} AND space_id IS NOT DISTINCT FROM ${what.space ?? null}
      AND event_type IS NOT DISTINCT FROM ${what.type ?? null}`
})

export interface Member {
  readonly space: string
  readonly principal: string
}

/** The members, of one space or of spaces one principal joined when asked, in (space, principal) order. */
export const members = Effect.fn("PushAudience.members")(function* (
  filter: { readonly space?: string | undefined; readonly principal?: string | undefined },
  limit: number,
) {
  const sql = yield* SqlClient.SqlClient
  return yield* sql<Member>`
    SELECT space_id AS space, principal FROM space_members
    WHERE ${filter.space === undefined ? sql`true` : sql`space_id = ${filter.space}`}
      AND ${filter.principal === undefined ? sql`true` : sql`principal = ${filter.principal}`}
    ORDER BY space_id, principal LIMIT ${limit}`
})

export interface Mute {
  readonly principal: string
  readonly space: string | null
  readonly type: string | null
}

/** One principal's mutes (or everyone's), in (principal, space, type) order. */
export const mutes = Effect.fn("PushAudience.mutes")(function* (
  filter: { readonly principal?: string | undefined },
  limit: number,
) {
  const sql = yield* SqlClient.SqlClient
  return yield* sql<Mute>`
    SELECT principal, space_id AS space, event_type AS type FROM notification_preferences
    WHERE ${filter.principal === undefined ? sql`true` : sql`principal = ${filter.principal}`}
    ORDER BY principal, space_id NULLS FIRST, event_type NULLS FIRST LIMIT ${limit}`
})
