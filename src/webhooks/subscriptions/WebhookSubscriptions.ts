/**
 * Webhook subscriptions: create, list, update, disable, enable, rotate the secret, delete, read.
 *
 * A subscription belongs to an owner principal, targets one URL, filters by event type (exact
 * types and patterns such as `order.*`; none: all types) and optionally by payload (`PayloadFilter`),
 * and covers a set of spaces; it receives the events committed after its creation, in seq order. Its signing secret (`whsec_...`) is shown once, at creation or rotation, is `Redacted` in
 * code, and is stored sealed (AES-256-GCM) so a database dump alone does not reveal it. After a
 * rotation the old secret stays valid for 24 h and deliveries are signed with both. An endpoint
 * that asks more than a signature gets it (`EndpointCredentials`): an OAuth2 bearer token, a client
 * certificate, a private CA; their secrets are sealed the same way and never shown again.
 *
 * An update changes the target, the filter, the scope or the delivery options
 * (`SubscriptionOptions`) in one transaction; deliveries already created keep their events, and
 * every one still pending goes to the new URL.
 *
 * Targets are validated at creation and update for fast feedback; the address actually dialed is checked
 * again at every delivery. The rest of the input is validated before any SQL: an
 * `InvalidSubscription` names the field (`owner`, `scope[3]`, `eventTypes[0]`, `filter.or[1].gt`)
 * and nothing is written. Event types must be valid event types or patterns (`EventTypePatterns`),
 * so `"a b"` or `"order*"`, which no event could ever match, are refused; scope and event types
 * are capped (`maxScope`, `maxEventTypes`).
 *
 * Building the layer runs `SealingKeyCheck.verify`: a process with another key than the
 * database's would seal secrets that no worker can open.
 */
import { Clock, Context, Duration, Effect, Layer, type Redacted, Schema } from "effect"
import { SqlClient } from "effect/sql"
import type { SqlError } from "effect/sql/SqlError"
import * as SealingKeyCheck from "../../crypto/SealingKeyCheck.ts"
import * as SecretBox from "../../crypto/SecretBox.ts"
import type { InvalidEvent } from "../../log/Event.ts"
import { type AppendError, EventLog, type EventLogPartitionMissing } from "../../log/EventLog.ts"
import { type UnsafeWebhookTarget, validateUrl } from "../../outbound/OutboundTarget.ts"
import { firstIssue } from "../../platform/FieldIssue.ts"
import { isUuid } from "../../platform/Uuid.ts"
import { WebhookConfig } from "../WebhookConfig.ts"
import * as DeliveryHistory from "./DeliveryHistory.ts"
import * as EndpointCredentials from "./EndpointCredentials.ts"
import { unknownName } from "./EventTypePatterns.ts"
import { NewSubscription, type Subscription, SubscriptionPatch } from "./SubscriptionInput.ts"
import { type Resumed, resume, type SeqNotInLog } from "./SubscriptionResume.ts"
import type { RetryNow } from "./SubscriptionRetry.ts"
import * as SubscriptionRetry from "./SubscriptionRetry.ts"
import { insertSubscription, selectSubscription, selectSubscriptions, updateSubscription } from "./SubscriptionRows.ts"
import { type DisabledCause, disable, stop } from "./SubscriptionStates.ts"
import * as SubscriptionTestEvent from "./SubscriptionTestEvent.ts"
import * as WebhookSecret from "./WebhookSecret.ts"

export { type EndpointAuthView, InvalidEndpointCredentials } from "./EndpointCredentials.ts"
export { type Resumed, SeqNotInLog } from "./SubscriptionResume.ts"

/** How long a rotated-out secret keeps signing. */
export const rotationOverlap = Duration.hours(24)

export type { Filter } from "./PayloadFilter.ts"
export {
  maxEventTypes,
  maxScope,
  NewSubscription,
  type Subscription,
  SubscriptionPatch,
} from "./SubscriptionInput.ts"

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

/** `sendTestEvent` with the layer's connection and log. */
const testEventSender = (sql: SqlClient.SqlClient, log: EventLog["Service"]) =>
  Effect.fn("WebhookSubscriptions.sendTestEvent")(function* (id: string, requestedBy: string) {
    if (!isUuid(id)) return yield* new SubscriptionNotFound({ id })
    const sent = yield* SubscriptionTestEvent.send(id, requestedBy).pipe(
      Effect.provideService(SqlClient.SqlClient, sql),
      Effect.provideService(EventLog, log),
    )
    return sent ?? (yield* new SubscriptionNotFound({ id }))
  })

export class WebhookSubscriptions extends Context.Service<
  WebhookSubscriptions,
  {
    readonly create: (
      input: NewSubscription,
    ) => Effect.Effect<
      { readonly id: string; readonly secret: Redacted.Redacted<string> },
      InvalidSubscription | UnsafeWebhookTarget | EndpointCredentials.InvalidEndpointCredentials | SqlError
    >
    readonly get: (id: string) => Effect.Effect<Subscription, SubscriptionNotFound | SqlError>
    /** One page, in id order (a cursor that does not change as subscriptions come and go). */
    readonly list: (options: ListOptions) => Effect.Effect<SubscriptionPage, SqlError>
    /** The patch's fields changed together; the subscription as it is now. */
    readonly update: (
      id: string,
      patch: SubscriptionPatch,
    ) => Effect.Effect<
      Subscription,
      | InvalidSubscription
      | UnsafeWebhookTarget
      | EndpointCredentials.InvalidEndpointCredentials
      | SubscriptionNotFound
      | SqlError
    >
    /**
     * Disables it (cause `manual`) and appends its `bothy.subscription.disabled` event in one
     * transaction; with no log partition for the time, neither happens (`EventLogPartitionMissing`).
     */
    readonly disable: (id: string) => Effect.Effect<void, SubscriptionNotFound | EventLogPartitionMissing | SqlError>
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
    /**
     * Appends a test event for the subscription (`SubscriptionTestEvent`), which it then delivers
     * as any event; `requestedBy` is the principal who asked, or `operator`.
     */
    readonly sendTestEvent: (
      id: string,
      requestedBy: string,
    ) => Effect.Effect<
      SubscriptionTestEvent.TestEventSent,
      SubscriptionNotFound | SubscriptionTestEvent.TestEventNeedsScope | Exclude<AppendError, InvalidEvent>
    >
  }
>()("bothy/WebhookSubscriptions") {
  static readonly layer = Layer.effect(
    WebhookSubscriptions,
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const config = yield* WebhookConfig
      // A manual disable appends its operational event with the log of the process.
      const log = yield* EventLog
      yield* SealingKeyCheck.verify(config.secretKey)

      const found = (id: string, n: number) => (n === 0 ? Effect.fail(new SubscriptionNotFound({ id })) : Effect.void)
      const checkId = (id: string) => (isUuid(id) ? Effect.void : Effect.fail(new SubscriptionNotFound({ id })))
      const knownTypes = (names: ReadonlyArray<string>) =>
        Effect.flatMap(Effect.provideService(unknownName(names), SqlClient.SqlClient, sql), (issue) =>
          issue === undefined ? Effect.void : Effect.fail(new InvalidSubscription(issue)),
        )

      const create = Effect.fn("WebhookSubscriptions.create")(function* (input: NewSubscription) {
        const valid = yield* Schema.decodeUnknownEffect(NewSubscription)(input).pipe(
          Effect.mapError((e) => new InvalidSubscription(firstIssue(e))),
        )
        yield* knownTypes(valid.eventTypes)
        const url = yield* validateUrl(valid.url, config.policy)
        yield* EndpointCredentials.check(valid, config.policy)
        const secret = WebhookSecret.generate()
        const sealed = SecretBox.seal(config.secretKey, secret)
        const id = yield* insertSubscription(
          sql,
          valid,
          url,
          sealed,
          EndpointCredentials.columns(config.secretKey, valid),
        )
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
        yield* knownTypes(valid.eventTypes ?? [])
        const url = valid.url === undefined ? undefined : yield* validateUrl(valid.url, config.policy)
        yield* EndpointCredentials.check(valid, config.policy)
        const credentials = EndpointCredentials.columns(config.secretKey, valid)
        if (!(yield* updateSubscription(sql, id, valid, url, credentials)))
          return yield* new SubscriptionNotFound({ id })
        return yield* get(id)
      })

      const disableOne = Effect.fn("WebhookSubscriptions.disable")(function* (id: string) {
        yield* get(id)
        yield* disable([id], "manual" satisfies DisabledCause).pipe(
          Effect.provideService(SqlClient.SqlClient, sql),
          Effect.provideService(EventLog, log),
        )
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

      const sendTestEvent = testEventSender(sql, log)

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
        sendTestEvent,
      })
    }),
  )
}
