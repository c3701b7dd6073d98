import { Console, Effect, Option, Redacted, Schema } from "effect"
import { Command, Flag } from "effect/cli"
import * as AdminSchemas from "../admin/AdminSchemas.ts"
import * as StatusReport from "../ops/StatusReport.ts"
import { type Subscription, WebhookSubscriptions } from "../webhooks/subscriptions/WebhookSubscriptions.ts"
import { json, print, subscriptionId, withWebhooks } from "./AdminCommandRuntime.ts"
import * as EndpointCredentialFlags from "./EndpointCredentialFlags.ts"

const subscriptionLines = (s: Subscription) =>
  [
    ["id", s.id],
    ["owner", s.owner],
    ["url", s.url],
    ["state", s.disabledCause === null ? s.state : `${s.state} (${s.disabledCause})`],
    ["scope", s.scope.join(", ")],
    ["event types", s.eventTypes.length === 0 ? "all" : s.eventTypes.join(", ")],
    ["rate limit", s.rateLimit === null ? "none" : `${s.rateLimit}/s`],
    ["headers", Object.keys(s.headers).join(", ") || "none"],
    ["payload filter", s.filter === null ? "none" : JSON.stringify(s.filter)],
    ...EndpointCredentialFlags.lines(s),
    ["started after seq", String(s.startedSeq)],
    ["last delivered seq", String(s.lastDeliveredSeq)],
    ["last sequence", String(s.lastSequence)],
  ]
    .map(([k, v]) => `${k!.padEnd(19)} ${v}`)
    .join("\n")

const url = Flag.String("url").pipe(Flag.withDescription("the https URL deliveries go to"))
const scope = Flag.String("scope").pipe(Flag.withDescription("a space whose events it receives (repeat it)"))
const eventType = Flag.String("event-type").pipe(
  Flag.withDescription("an event type or pattern (order.*) it receives (repeat it; none: every type)"),
  Flag.atLeast(0),
)
const rateLimit = Flag.String("rate-limit").pipe(
  Flag.withDescription("requests per second at most, or none"),
  Flag.optional,
)
const filter = Flag.String("filter").pipe(
  Flag.withDescription(
    'a payload filter as JSON, e.g. \'{"path": "$.amount", "gte": 100}\' (docs/webhooks.md), or none to remove it',
  ),
  Flag.withSchema(Schema.Union([Schema.Literal("none"), Schema.fromJsonString(Schema.Json)])),
  Flag.optional,
)
const filterField = (flag: Option.Option<Schema.Json>) =>
  Option.isSome(flag) ? { filter: flag.value === "none" ? null : flag.value } : {}
const header = Flag.KeyValuePair("header").pipe(
  Flag.withDescription("an extra request header, NAME=VALUE (repeat it)"),
  Flag.optional,
)

/**
 * `none` removes the limit; anything else is the number `WebhookSubscriptions` checks (a non-number
 * stays one, refused).
 */
const parseRateLimit = (raw: string) => (raw.trim().toLowerCase() === "none" ? null : Number(raw))

const create = Command.make(
  "create",
  {
    owner: Flag.String("owner").pipe(Flag.withDescription("the owner principal")),
    url,
    scope: scope.pipe(Flag.atLeast(1)),
    eventType,
    rateLimit,
    header,
    filter,
    ...EndpointCredentialFlags.flags,
    json,
  },
  (flags) =>
    Effect.gen(function* () {
      const webhooks = yield* WebhookSubscriptions
      const { id, secret } = yield* webhooks.create({
        ...filterField(flags.filter),
        ...EndpointCredentialFlags.fieldsOf(flags),
        owner: flags.owner,
        url: flags.url,
        scope: flags.scope,
        eventTypes: flags.eventType,
        ...(Option.isSome(flags.rateLimit) ? { rateLimit: parseRateLimit(flags.rateLimit.value) } : {}),
        ...(Option.isSome(flags.header) ? { headers: flags.header.value } : {}),
      })
      const subscription = yield* Effect.orDie(webhooks.get(id))
      yield* print(AdminSchemas.CreatedSubscription, { subscription, secret: Redacted.value(secret) }, flags.json, () =>
        [
          subscriptionLines(subscription),
          "",
          `signing secret (shown once; hand it to the receiver): ${Redacted.value(secret)}`,
        ].join("\n"),
      )
    }).pipe(withWebhooks),
).pipe(Command.withDescription("Create a webhook subscription; its signing secret is printed once"))

const list = Command.make(
  "list",
  {
    owner: Flag.String("owner").pipe(Flag.withDescription("only this owner's"), Flag.optional),
    state: Flag.Literals("state", ["active", "disabled"]).pipe(Flag.optional),
    after: Flag.String("after").pipe(
      Flag.withDescription("the page after this id (the last line's `next`)"),
      Flag.optional,
    ),
    limit: Flag.Int("limit").pipe(Flag.withDefault(AdminSchemas.defaultLimit)),
    json,
  },
  (flags) =>
    Effect.gen(function* () {
      const page = yield* (yield* WebhookSubscriptions).list({
        owner: Option.getOrUndefined(flags.owner),
        state: Option.getOrUndefined(flags.state),
        after: Option.getOrUndefined(flags.after),
        limit: flags.limit,
      })
      yield* print(AdminSchemas.SubscriptionPage, { items: page.subscriptions, next: page.next }, flags.json, () =>
        [
          page.subscriptions.length === 0
            ? "  none"
            : StatusReport.grid(
                ["id", "owner", "state", "url", "scope"],
                page.subscriptions.map((s) => [
                  s.id,
                  s.owner,
                  s.disabledCause === null ? s.state : `${s.state} (${s.disabledCause})`,
                  s.url,
                  s.scope.length <= 3 ? s.scope.join(",") : `${s.scope.slice(0, 3).join(",")} +${s.scope.length - 3}`,
                ]),
              ),
          ...(page.next === null ? [] : [`next: --after ${page.next}`]),
        ].join("\n"),
      )
    }).pipe(withWebhooks),
).pipe(Command.withDescription("List webhook subscriptions, a page at a time"))

/** A command on one subscription that prints it as it is afterwards. */
const onSubscription = (
  name: string,
  description: string,
  change: (webhooks: WebhookSubscriptions["Service"], id: string) => Effect.Effect<unknown, unknown>,
) =>
  Command.make(name, { id: subscriptionId, json }, ({ id, json }) =>
    Effect.gen(function* () {
      const webhooks = yield* WebhookSubscriptions
      yield* change(webhooks, id)
      const s = yield* webhooks.get(id)
      yield* print(AdminSchemas.Subscription, s, json, () => subscriptionLines(s))
    }).pipe(withWebhooks),
  ).pipe(Command.withDescription(description))

const show = onSubscription("show", "Print one webhook subscription", () => Effect.void)
const disable = onSubscription("disable", "Disable a subscription: its pending deliveries end", (w, id) =>
  w.disable(id),
)

const update = Command.make(
  "update",
  {
    id: subscriptionId,
    url: url.pipe(Flag.optional),
    scope: scope.pipe(Flag.atLeast(0)),
    eventType,
    allTypes: Flag.Boolean("all-types").pipe(Flag.withDescription("receive every event type"), Flag.withDefault(false)),
    rateLimit,
    header,
    clearHeaders: Flag.Boolean("clear-headers").pipe(
      Flag.withDescription("remove the extra headers"),
      Flag.withDefault(false),
    ),
    filter,
    ...EndpointCredentialFlags.flags,
    ...EndpointCredentialFlags.clearFlags,
    json,
  },
  (flags) =>
    Effect.gen(function* () {
      const webhooks = yield* WebhookSubscriptions
      const s = yield* webhooks.update(flags.id, {
        ...filterField(flags.filter),
        ...EndpointCredentialFlags.fieldsOf(flags, flags),
        ...(Option.isSome(flags.url) ? { url: flags.url.value } : {}),
        ...(flags.scope.length > 0 ? { scope: flags.scope } : {}),
        ...(flags.allTypes ? { eventTypes: [] } : flags.eventType.length > 0 ? { eventTypes: flags.eventType } : {}),
        ...(Option.isSome(flags.rateLimit) ? { rateLimit: parseRateLimit(flags.rateLimit.value) } : {}),
        ...(flags.clearHeaders ? { headers: {} } : Option.isSome(flags.header) ? { headers: flags.header.value } : {}),
      })
      yield* print(AdminSchemas.Subscription, s, flags.json, () => subscriptionLines(s))
    }).pipe(withWebhooks),
).pipe(
  Command.withDescription(
    "Change a subscription's URL, scope (--scope replaces it), event types, payload filter, rate limit, extra headers (--header replaces them) or endpoint credentials (each replaced whole)",
  ),
)

const enable = Command.make(
  "enable",
  {
    id: subscriptionId,
    fromSeq: Flag.String("from-seq").pipe(
      Flag.withDescription("send the events from this seq on (still in the log); default: from the head"),
      Flag.withSchema(Schema.BigIntFromString),
      Flag.optional,
    ),
    json,
  },
  ({ id, fromSeq, json }) =>
    Effect.gen(function* () {
      const webhooks = yield* WebhookSubscriptions
      const resumed = yield* webhooks.enable(id, Option.isSome(fromSeq) ? { fromSeq: fromSeq.value } : undefined)
      const enabled =
        resumed._tag === "Enabled"
          ? { enabled: true, after: resumed.after, deliveries: resumed.deliveries }
          : { enabled: false, after: null, deliveries: 0 }
      yield* print(AdminSchemas.Enabled, enabled, json, () =>
        enabled.enabled
          ? `subscription ${id} enabled: it receives the events after seq ${enabled.after}${enabled.deliveries > 0 ? ` (${enabled.deliveries} deliveries of events before now go out first)` : ""}`
          : `subscription ${id} is active already: nothing changed`,
      )
    }).pipe(withWebhooks),
).pipe(Command.withDescription("Enable a disabled subscription, from the head of the log or from --from-seq"))

const rotate = Command.make("rotate", { id: subscriptionId, json }, ({ id, json }) =>
  Effect.gen(function* () {
    const secret = Redacted.value(yield* (yield* WebhookSubscriptions).rotateSecret(id))
    yield* print(AdminSchemas.RotatedSecret, { secret }, json, () =>
      [`new signing secret (shown once; the old one signs too for 24 hours): ${secret}`].join("\n"),
    )
  }).pipe(withWebhooks),
).pipe(Command.withDescription("Rotate a subscription's signing secret; the new one is printed once"))

const retry = Command.make("retry", { id: subscriptionId, json }, ({ id, json }) =>
  Effect.gen(function* () {
    const done = AdminSchemas.retried(yield* (yield* WebhookSubscriptions).retryNow(id))
    yield* print(AdminSchemas.Retried, done, json, () =>
      done.outcome === "resumed"
        ? `subscription ${id}: its drainer (job ${done.job}) runs now; ${done.pending} deliveries resume in order`
        : done.outcome === "running"
          ? `subscription ${id}: its drainer (job ${done.job}) is running already; ${done.pending} deliveries pending`
          : done.outcome === "disabled"
            ? `subscription ${id} is disabled: enable it to send again`
            : `subscription ${id}: nothing is pending`,
    )
  }).pipe(withWebhooks),
).pipe(Command.withDescription("Resume a subscription's pending deliveries now instead of at its next retry"))

const testEvent = Command.make("test-event", { id: subscriptionId, json }, ({ id, json }) =>
  Effect.gen(function* () {
    const sent = yield* (yield* WebhookSubscriptions).sendTestEvent(id, "operator")
    yield* print(
      AdminSchemas.TestEventSent,
      sent,
      json,
      () =>
        `test event (seq ${sent.seq}, space ${sent.space}) appended for subscription ${id}: it goes out as any event, under its next sequence`,
    )
  }).pipe(withWebhooks),
).pipe(Command.withDescription("Send a subscription a bothy.subscription.test event, which only it receives"))

const remove = Command.make("delete", { id: subscriptionId, json }, ({ id, json }) =>
  Effect.gen(function* () {
    yield* (yield* WebhookSubscriptions).remove(id)
    yield* json ? Console.log(JSON.stringify({ deleted: id })) : Console.log(`subscription ${id} deleted`)
  }).pipe(withWebhooks),
).pipe(Command.withDescription("Delete a subscription and its delivery history"))

export const subscriptions = Command.make("subscriptions").pipe(
  Command.withDescription("Webhook subscriptions"),
  Command.withSubcommands([create, list, show, update, disable, enable, rotate, retry, testEvent, remove]),
)
