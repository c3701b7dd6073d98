/**
 * Webhook subscriptions: create, list, update, disable, enable, rotate the secret, delete, read.
 *
 * A subscription belongs to an owner principal, targets one URL, filters by event type (none: all
 * types) and covers a set of spaces; it receives the events committed after its creation, in seq
 * order. Its signing secret (`whsec_...`) is shown once, at creation or rotation, is `Redacted` in
 * code, and is stored sealed (AES-256-GCM) so a database dump alone does not reveal it. After a
 * rotation the old secret stays valid for 24 h and deliveries are signed with both.
 *
 * An update changes the target, the filter, the scope or the delivery options
 * (`SubscriptionOptions`) in one transaction; deliveries already created keep their events, and
 * every one still pending goes to the new URL.
 *
 * Targets are validated at creation and update for fast feedback; the address actually dialed is checked
 * again at every delivery. The rest of the input is validated before any SQL: an
 * `InvalidSubscription` names the field (`owner`, `scope[3]`, `eventTypes[0]`) and nothing is
 * written. Event types must be valid event types (`Event.eventTypePattern`) and match exactly, so
 * `"a b"` or `"order.*"`, which no event could ever match, are refused; scope and event types are
 * capped (`maxScope`, `maxEventTypes`).
 *
 * Building the layer runs `SealingKeyCheck.verify`: a process with another key than the
 * database's would seal secrets that no worker can open.
 */
import { Clock, Context, Duration, Effect, Layer, type Redacted, Schema } from "effect"
import { SqlClient, type Statement } from "effect/sql"
import type { SqlError } from "effect/sql/SqlError"
import * as SealingKeyCheck from "../../crypto/SealingKeyCheck.ts"
import * as SecretBox from "../../crypto/SecretBox.ts"
import { EventType } from "../../log/Event.ts"
import * as EventLog from "../../log/EventLog.ts"
import { type UnsafeWebhookTarget, validateUrl } from "../../outbound/OutboundTarget.ts"
import { firstIssue } from "../../platform/FieldIssue.ts"
import { storableCheck } from "../../platform/StorableText.ts"
import { isUuid } from "../../platform/Uuid.ts"
import { WebhookConfig } from "../WebhookConfig.ts"
import * as DeliveryHistory from "./DeliveryHistory.ts"
import { ExtraHeaders, normalize, RateLimit } from "./SubscriptionOptions.ts"
import { type Resumed, resume, type SeqNotInLog } from "./SubscriptionResume.ts"
import type { RetryNow } from "./SubscriptionRetry.ts"
import * as SubscriptionRetry from "./SubscriptionRetry.ts"
import { type DisabledCause, disable, stop } from "./SubscriptionStates.ts"
import * as WebhookSecret from "./WebhookSecret.ts"

export { type Resumed, SeqNotInLog } from "./SubscriptionResume.ts"

/** How long a rotated-out secret keeps signing. */
export const rotationOverlap = Duration.hours(24)

/** The most spaces one subscription may cover. */
export const maxScope = 10_000
/** The most event types one subscription may list. */
export const maxEventTypes = 100

const Text = Schema.String.check(Schema.isNonEmpty(), Schema.isMaxLength(200), storableCheck)

const changeable = {
  url: Schema.String.check(Schema.isNonEmpty(), Schema.isMaxLength(2048), storableCheck),
  /** Event types to receive, each matched exactly; empty for all. */
  eventTypes: Schema.Array(EventType).check(
    Schema.isMaxLength(maxEventTypes, { message: `at most ${maxEventTypes} event types` }),
  ),
  /** Spaces whose events it may receive. */
  scope: Schema.Array(Text).check(
    Schema.isMinLength(1, { message: "at least one space" }),
    Schema.isMaxLength(maxScope, { message: `at most ${maxScope} spaces` }),
  ),
  /** Requests per second the drainer never exceeds for this endpoint; null or absent: no limit. */
  rateLimit: Schema.optional(Schema.NullOr(RateLimit)),
  /** Extra request headers; never one bothy sets itself. */
  headers: Schema.optional(ExtraHeaders),
}

export const NewSubscription = Schema.Struct({ owner: Text, ...changeable })
export type NewSubscription = typeof NewSubscription.Type

/** What an update may change; absent fields stay as they are (`rateLimit: null` removes the limit). */
export const SubscriptionPatch = Schema.Struct({
  url: Schema.optional(changeable.url),
  eventTypes: Schema.optional(changeable.eventTypes),
  scope: Schema.optional(changeable.scope),
  rateLimit: changeable.rateLimit,
  headers: changeable.headers,
})
export type SubscriptionPatch = typeof SubscriptionPatch.Type

export interface Subscription {
  readonly id: string
  readonly owner: string
  readonly url: string
  readonly eventTypes: ReadonlyArray<string>
  readonly scope: ReadonlyArray<string>
  readonly state: "active" | "disabled"
  readonly disabledCause: DisabledCause | null
  readonly startedSeq: bigint
  readonly lastDeliveredSeq: bigint
  /** The last `sequence` a delivery of the subscription took (numbers are taken when first sent). */
  readonly lastSequence: bigint
  readonly rateLimit: number | null
  /** Extra request headers, names in lower case. */
  readonly headers: Readonly<Record<string, string>>
}

export interface EnableOptions {
  /** The first seq to send (still in the log, at most the head); absent: from the head. */
  readonly fromSeq?: bigint
}

export class InvalidSubscription extends Schema.TaggedError<InvalidSubscription>()("InvalidSubscription", {
  /** The offending field (`owner`, `scope[3]`), or empty when the input itself is not an object. */
  field: Schema.String,
  detail: Schema.String,
}) {
  override get message() {
    return `invalid webhook subscription${this.field === "" ? "" : ` at ${this.field}`}: ${this.detail}`
  }
}

export class SubscriptionNotFound extends Schema.TaggedError<SubscriptionNotFound>()("SubscriptionNotFound", {
  id: Schema.String,
}) {
  override get message() {
    return `no webhook subscription ${this.id}`
  }
}

/** The subscription row and its scope, in one transaction; its cursor starts at the log's head. */
const insertSubscription = (sql: SqlClient.SqlClient, valid: NewSubscription, url: URL, sealed: string) =>
  sql.withTransaction(
    Effect.gen(function* () {
      const [row] = yield* sql<{ id: string }>`
        INSERT INTO webhook_subscriptions
          (owner, url, secret_sealed, event_types, started_seq, last_delivered_seq, rate_limit, headers)
        SELECT ${valid.owner}, ${url.toString()}, ${sealed}, ${valid.eventTypes as Array<string>}::text[],
               head.seq, head.seq, ${valid.rateLimit ?? null}, ${JSON.stringify(normalize(valid.headers ?? {}))}::jsonb
        FROM (SELECT ${EventLog.headSeq(sql)} AS seq) AS head
        RETURNING id::text`
      yield* insertScope(sql, row!.id, valid.scope)
      return row!.id
    }),
  )

// One array parameter, not two per space: the protocol allows 65,535 parameters at most.
const insertScope = (sql: SqlClient.SqlClient, id: string, scope: ReadonlyArray<string>) => sql`
  INSERT INTO webhook_subscription_spaces (space_id, subscription_id)
  SELECT DISTINCT unnest(${scope as Array<string>}::text[]), ${id}::uuid`

/** The patch's fields in one transaction; `false` when no such subscription. */
const updateSubscription = (sql: SqlClient.SqlClient, id: string, patch: SubscriptionPatch, url: URL | undefined) =>
  sql.withTransaction(
    Effect.gen(function* () {
      const rows = yield* sql`
        UPDATE webhook_subscriptions SET
          url = coalesce(${url?.toString() ?? null}, url),
          event_types = coalesce(${(patch.eventTypes as Array<string> | undefined) ?? null}::text[], event_types),
          rate_limit = CASE WHEN ${patch.rateLimit !== undefined} THEN ${patch.rateLimit ?? null}::float8 ELSE rate_limit END,
          headers = coalesce(${patch.headers === undefined ? null : JSON.stringify(normalize(patch.headers))}::jsonb, headers)
        WHERE id = ${id}::uuid RETURNING id`
      if (rows.length === 0) return false
      if (patch.scope !== undefined) {
        yield* sql`DELETE FROM webhook_subscription_spaces WHERE subscription_id = ${id}::uuid`
        yield* insertScope(sql, id, patch.scope)
      }
      return true
    }),
  )

/** The subscriptions `where` selects, in id order, at most `limit`. */
const selectSubscriptions = (sql: SqlClient.SqlClient, where: Statement.Fragment, limit: number) =>
  Effect.map(
    sql<Omit<Subscription, "scope"> & { scope: ReadonlyArray<string> | null }>`
      SELECT s.id::text, s.owner, s.url, s.event_types AS "eventTypes", s.state, s.disabled_cause AS "disabledCause",
             s.started_seq AS "startedSeq", s.last_delivered_seq AS "lastDeliveredSeq",
             s.last_sequence AS "lastSequence", s.rate_limit AS "rateLimit", s.headers,
             (SELECT array_agg(space_id ORDER BY space_id) FROM webhook_subscription_spaces WHERE subscription_id = s.id)
               AS scope
      FROM webhook_subscriptions AS s WHERE ${where} ORDER BY s.id LIMIT ${limit}`,
    (rows): ReadonlyArray<Subscription> => rows.map((row) => ({ ...row, scope: row.scope ?? [] })),
  )

const selectSubscription = (sql: SqlClient.SqlClient, id: string) =>
  Effect.map(selectSubscriptions(sql, sql`s.id = ${id}::uuid`, 1), (rows) => rows[0])

export interface ListOptions {
  /** Only this owner's subscriptions. */
  readonly owner?: string | undefined
  readonly state?: "active" | "disabled" | undefined
  /** Subscriptions after this id (the previous page's `next`), in id order. */
  readonly after?: string | undefined
  readonly limit: number
}

/** A page of subscriptions and the cursor of the next one (`null` after the last). */
export interface SubscriptionPage {
  readonly subscriptions: ReadonlyArray<Subscription>
  readonly next: string | null
}

export class WebhookSubscriptions extends Context.Service<
  WebhookSubscriptions,
  {
    readonly create: (
      input: NewSubscription,
    ) => Effect.Effect<
      { readonly id: string; readonly secret: Redacted.Redacted<string> },
      InvalidSubscription | UnsafeWebhookTarget | SqlError
    >
    readonly get: (id: string) => Effect.Effect<Subscription, SubscriptionNotFound | SqlError>
    /** One page, in id order (a cursor that does not change as subscriptions come and go). */
    readonly list: (options: ListOptions) => Effect.Effect<SubscriptionPage, SqlError>
    /** The patch's fields changed together; the subscription as it is now. */
    readonly update: (
      id: string,
      patch: SubscriptionPatch,
    ) => Effect.Effect<Subscription, InvalidSubscription | UnsafeWebhookTarget | SubscriptionNotFound | SqlError>
    readonly disable: (id: string) => Effect.Effect<void, SubscriptionNotFound | SqlError>
    /**
     * Active again (a subscription that is active already is left as it is). From the head of the
     * log by default: what it missed while disabled is not sent. With `fromSeq`, a seq still in the
     * log: the events from it on are sent, those the `webhooks` consumer had read already first, in
     * seq order; a seq that left the log is refused with `SeqNotInLog`, naming the oldest seq kept.
     */
    readonly enable: (
      id: string,
      options?: EnableOptions,
    ) => Effect.Effect<Exclude<Resumed, { readonly _tag: "NotFound" }>, SubscriptionNotFound | SeqNotInLog | SqlError>
    readonly rotateSecret: (id: string) => Effect.Effect<Redacted.Redacted<string>, SubscriptionNotFound | SqlError>
    readonly remove: (id: string) => Effect.Effect<void, SubscriptionNotFound | SqlError>
    /**
     * Runs the subscription's drainer now rather than at the end of its retry delay: the pending
     * deliveries resume in order, from the one that failed (`SubscriptionRetry`).
     */
    readonly retryNow: (id: string) => Effect.Effect<RetryNow, SubscriptionNotFound | SqlError>
  }
>()("bothy/WebhookSubscriptions") {
  static readonly layer = Layer.effect(
    WebhookSubscriptions,
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const config = yield* WebhookConfig
      yield* SealingKeyCheck.verify(config.secretKey)

      const found = (id: string, n: number) => (n === 0 ? Effect.fail(new SubscriptionNotFound({ id })) : Effect.void)
      const checkId = (id: string) => (isUuid(id) ? Effect.void : Effect.fail(new SubscriptionNotFound({ id })))

      const create = Effect.fn("WebhookSubscriptions.create")(function* (input: NewSubscription) {
        const valid = yield* Schema.decodeUnknownEffect(NewSubscription)(input).pipe(
          Effect.mapError((e) => new InvalidSubscription(firstIssue(e))),
        )
        const url = yield* validateUrl(valid.url, config.policy)
        const secret = WebhookSecret.generate()
        const sealed = SecretBox.seal(config.secretKey, secret)
        const id = yield* insertSubscription(sql, valid, url, sealed)
        return { id, secret }
      })

      const get = Effect.fn("WebhookSubscriptions.get")(function* (id: string) {
        yield* checkId(id)
        const row = yield* selectSubscription(sql, id)
        if (row === undefined) return yield* new SubscriptionNotFound({ id })
        return row
      })

      const list = Effect.fn("WebhookSubscriptions.list")(function* (options: ListOptions) {
        const where = sql.and([
          options.owner === undefined ? sql`true` : sql`s.owner = ${options.owner}`,
          options.state === undefined ? sql`true` : sql`s.state = ${options.state}`,
          // A cursor that is no uuid matches nothing after it rather than failing the cast.
          options.after === undefined
            ? sql`true`
            : isUuid(options.after)
              ? sql`s.id > ${options.after}::uuid`
              : sql`false`,
        ])
        const rows = yield* selectSubscriptions(sql, where, options.limit + 1)
        const page = rows.slice(0, options.limit)
        return { subscriptions: page, next: rows.length > options.limit ? page.at(-1)!.id : null }
      })

      const update = Effect.fn("WebhookSubscriptions.update")(function* (id: string, patch: SubscriptionPatch) {
        yield* checkId(id)
        const valid = yield* Schema.decodeUnknownEffect(SubscriptionPatch)(patch).pipe(
          Effect.mapError((e) => new InvalidSubscription(firstIssue(e))),
        )
        const url = valid.url === undefined ? undefined : yield* validateUrl(valid.url, config.policy)
        if (!(yield* updateSubscription(sql, id, valid, url))) return yield* new SubscriptionNotFound({ id })
        return yield* get(id)
      })

      const disableOne = Effect.fn("WebhookSubscriptions.disable")(function* (id: string) {
        yield* get(id)
        yield* disable([id], "manual" satisfies DisabledCause).pipe(Effect.provideService(SqlClient.SqlClient, sql))
      })

      const enable = Effect.fn("WebhookSubscriptions.enable")(function* (id: string, options?: EnableOptions) {
        yield* checkId(id)
        const resumed = yield* resume(id, options?.fromSeq).pipe(Effect.provideService(SqlClient.SqlClient, sql))
        if (resumed._tag === "NotFound") return yield* new SubscriptionNotFound({ id })
        return resumed
      })

      const rotateSecret = Effect.fn("WebhookSubscriptions.rotateSecret")(function* (id: string) {
        yield* checkId(id)
        const secret = WebhookSecret.generate()
        const until = new Date((yield* Clock.currentTimeMillis) + Duration.toMillis(rotationOverlap))
        const rows = yield* sql`
          UPDATE webhook_subscriptions
          SET previous_secret_sealed = secret_sealed, previous_secret_until = ${until},
              secret_sealed = ${SecretBox.seal(config.secretKey, secret)}
          WHERE id = ${id}::uuid RETURNING id`
        yield* found(id, rows.length)
        return secret
      })

      // Stopped first (as a disable does, but neither counted nor logged as one), so no round adds
      // deliveries while the history goes, batch by batch; the one line says it was deleted.
      const remove = Effect.fn("WebhookSubscriptions.remove")(function* (id: string) {
        const subscription = yield* get(id)
        yield* Effect.provideService(
          Effect.andThen(stop([id], "manual" satisfies DisabledCause), DeliveryHistory.removeAllOf(id)),
          SqlClient.SqlClient,
          sql,
        )
        const rows = yield* sql`DELETE FROM webhook_subscriptions WHERE id = ${id}::uuid RETURNING id`
        yield* found(id, rows.length)
        yield* Effect.logInfo(`webhooks: subscription ${id} of ${subscription.owner} deleted with its delivery history`)
      })

      const retryNow = (id: string) =>
        Effect.gen(function* () {
          yield* checkId(id)
          const done = yield* SubscriptionRetry.retryNow(id).pipe(Effect.provideService(SqlClient.SqlClient, sql))
          return done ?? (yield* new SubscriptionNotFound({ id }))
        })

      return WebhookSubscriptions.of({
        create,
        get,
        list,
        update,
        disable: disableOne,
        enable,
        rotateSecret,
        remove,
        retryNow,
      })
    }),
  )
}
