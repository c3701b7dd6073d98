/**
 * The admin API's work from a terminal, against the database alone (no worker needs to run):
 * `bothy subscriptions ...`, `bothy deliveries ...`, `bothy registrations ...`. Each command calls
 * the service the API's handler calls (`WebhookSubscriptions`, `WebhookDeliveries`,
 * `DeliveryResend`, `PushRegistrations`), as the operator; tables for people, `--json` (the API's
 * shapes, from `AdminSchemas`) for scripts.
 *
 * No command migrates: each first checks that the schema is at this bothy's latest migration
 * (`Database.checkMigrated`) and otherwise stops with one line naming the missing migration and
 * saying to run `bothy migrate`. A newer CLI must not upgrade a database under an older fleet,
 * whether the command reads or writes (a write against an older schema would fail half-way
 * anyway); upgrading is `bothy migrate`'s decision, taken with the workers. A re-send or a
 * recovery makes deliveries pending; a running worker sends them.
 */
import { join } from "node:path"
import { Console, Effect, Layer, Option, Redacted, Schema } from "effect"
import { Argument, Command, Flag } from "effect/cli"
import * as AdminSchemas from "../admin/AdminSchemas.ts"
import * as LogFormat from "../ops/LogFormat.ts"
import * as StatusReport from "../ops/StatusReport.ts"
import * as Database from "../platform/Database.ts"
import { firstIssue } from "../platform/FieldIssue.ts"
import * as PushConfig from "../push/PushConfig.ts"
import * as PushRegistration from "../push/PushRegistration.ts"
import * as PushRegistrations from "../push/PushRegistrations.ts"
import * as DeliveryResend from "../webhooks/DeliveryResend.ts"
import * as WebhookConfig from "../webhooks/WebhookConfig.ts"
import * as WebhookDeliveries from "../webhooks/WebhookDeliveries.ts"
import { type Subscription, SubscriptionNotFound, WebhookSubscriptions } from "../webhooks/WebhookSubscriptions.ts"

/**
 * The webhook settings as the worker reads them: the embedded development server keeps its sealing
 * key beside its data unless one is given.
 */
export const loadWebhookSettings = Effect.gen(function* () {
  const key = (yield* Database.external)
    ? undefined
    : WebhookConfig.keyOrFile(join(yield* Database.home, "webhook-secret-key"))
  return yield* WebhookConfig.load(key)
})

/** The pool (its schema checked, never changed) and `WebhookSubscriptions` on it, for one command. */
const WebhooksLive = Layer.unwrap(
  Effect.map(loadWebhookSettings, (settings) =>
    WebhookSubscriptions.layer.pipe(Layer.provide(WebhookConfig.WebhookConfig.layerWith(settings))),
  ),
).pipe(Layer.provideMerge(Database.checkMigrated), Layer.provideMerge(Database.layer))

/** Runs a command on the checked pool (or also `WebhookSubscriptions`), its logs on standard error. */
const withDatabase = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  effect.pipe(
    Effect.provide(Database.checkMigrated),
    Effect.provide(Database.layer),
    Effect.provide(LogFormat.layerStderr()),
  )
const withWebhooks = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  effect.pipe(Effect.provide(WebhooksLive), Effect.provide(LogFormat.layerStderr()))

const json = Flag.Boolean("json").pipe(
  Flag.withDescription("print JSON, as the admin API answers (ids and seqs as strings)"),
  Flag.withDefault(false),
)

/** `value` as JSON in the API's shape, or `table()` for people. */
const print = <A, I>(schema: Schema.Codec<A, I>, value: A, asJson: boolean, table: () => string) =>
  Console.log(asJson ? JSON.stringify(Schema.encodeSync(Schema.toCodecJson(schema))(value), null, 2) : table())

const orDash = (value: unknown) => (value === null || value === undefined || value === "" ? "-" : String(value))

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
    ["started after seq", String(s.startedSeq)],
    ["last delivered seq", String(s.lastDeliveredSeq)],
    ["last sequence", String(s.lastSequence)],
  ]
    .map(([k, v]) => `${k!.padEnd(19)} ${v}`)
    .join("\n")

const subscriptionId = Argument.String("id").pipe(Argument.withDescription("the subscription's id"))
const deliveryId = Argument.String("delivery").pipe(
  Argument.withDescription("the delivery's id"),
  Argument.withSchema(Schema.BigIntFromString),
)

const url = Flag.String("url").pipe(Flag.withDescription("the https URL deliveries go to"))
const scope = Flag.String("scope").pipe(Flag.withDescription("a space whose events it receives (repeat it)"))
const eventType = Flag.String("event-type").pipe(
  Flag.withDescription("an event type it receives (repeat it; none: every type)"),
  Flag.atLeast(0),
)
const rateLimit = Flag.String("rate-limit").pipe(
  Flag.withDescription("requests per second at most, or none"),
  Flag.optional,
)
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
    json,
  },
  (flags) =>
    Effect.gen(function* () {
      const webhooks = yield* WebhookSubscriptions
      const { id, secret } = yield* webhooks.create({
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
    json,
  },
  (flags) =>
    Effect.gen(function* () {
      const webhooks = yield* WebhookSubscriptions
      const s = yield* webhooks.update(flags.id, {
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
    "Change a subscription's URL, scope (--scope replaces it), event types, rate limit or extra headers (--header replaces them)",
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

const remove = Command.make("delete", { id: subscriptionId, json }, ({ id, json }) =>
  Effect.gen(function* () {
    yield* (yield* WebhookSubscriptions).remove(id)
    yield* json ? Console.log(JSON.stringify({ deleted: id })) : Console.log(`subscription ${id} deleted`)
  }).pipe(withWebhooks),
).pipe(Command.withDescription("Delete a subscription and its delivery history"))

export const subscriptions = Command.make("subscriptions").pipe(
  Command.withDescription("Webhook subscriptions"),
  Command.withSubcommands([create, list, show, update, disable, enable, rotate, retry, remove]),
)

const deliveryRows = (ds: ReadonlyArray<WebhookDeliveries.DeliveryRecord>) =>
  ds.length === 0
    ? "  none"
    : StatusReport.grid(
        ["id", "seq", "type", "sequence", "state", "attempts", "last status", "created"],
        ds.map((d) => [
          String(d.id),
          String(d.eventSeq),
          orDash(d.eventType),
          orDash(d.sequence),
          d.deadReason === null ? d.state : `${d.state} (${d.deadReason})`,
          String(d.attempts),
          orDash(d.lastStatus ?? d.lastErrorClass),
          d.createdAt.toISOString(),
        ]),
      )

/** Fails with `SubscriptionNotFound` unless the subscription exists. */
const existing = (id: string) => Effect.flatMap(WebhookSubscriptions, (w) => w.get(id))

const listDeliveries = Command.make(
  "list",
  {
    subscription: subscriptionId,
    state: Flag.Literals("state", WebhookDeliveries.deliveryStates).pipe(Flag.optional),
    since: Flag.Date("since").pipe(Flag.withDescription("created at or after this time"), Flag.optional),
    until: Flag.Date("until").pipe(Flag.withDescription("created before this time"), Flag.optional),
    before: Flag.String("before").pipe(
      Flag.withDescription("the page after this delivery id (the last line's `next`)"),
      Flag.withSchema(Schema.BigIntFromString),
      Flag.optional,
    ),
    limit: Flag.Int("limit").pipe(Flag.withDefault(AdminSchemas.defaultLimit)),
    json,
  },
  (flags) =>
    Effect.gen(function* () {
      yield* existing(flags.subscription)
      const page = yield* WebhookDeliveries.list({
        subscriptionId: flags.subscription,
        state: Option.getOrUndefined(flags.state),
        since: Option.getOrUndefined(flags.since),
        until: Option.getOrUndefined(flags.until),
        before: Option.getOrUndefined(flags.before),
        limit: flags.limit,
      })
      yield* print(AdminSchemas.DeliveryPage, { items: page.deliveries, next: page.next }, flags.json, () =>
        [deliveryRows(page.deliveries), ...(page.next === null ? [] : [`next: --before ${page.next}`])].join("\n"),
      )
    }).pipe(withWebhooks),
).pipe(Command.withDescription("List a subscription's deliveries, newest first"))

const showDelivery = Command.make("show", { delivery: deliveryId, json }, ({ delivery, json }) =>
  Effect.gen(function* () {
    const found = yield* WebhookDeliveries.get(delivery)
    yield* print(AdminSchemas.DeliveryWithAttempts, found, json, () =>
      [
        deliveryRows([found.delivery]),
        "",
        "attempts",
        found.attempts.length === 0
          ? "  none"
          : StatusReport.grid(
              ["#", "started", "ms", "status", "error", "response"],
              found.attempts.map((a) => [
                String(a.number),
                a.startedAt.toISOString(),
                String(a.durationMs),
                orDash(a.status),
                orDash(a.errorClass),
                orDash(a.responseBody?.slice(0, 60).replaceAll(/\s+/g, " ")),
              ]),
            ),
      ].join("\n"),
    )
  }).pipe(withWebhooks),
).pipe(Command.withDescription("Print one delivery and its attempts"))

const resend = Command.make("resend", { delivery: deliveryId, json }, ({ delivery, json }) =>
  Effect.gen(function* () {
    if (!(yield* DeliveryResend.resend(delivery))) {
      return yield* new WebhookDeliveries.DeliveryNotFound({ id: String(delivery) })
    }
    const { delivery: d } = yield* WebhookDeliveries.get(delivery)
    yield* print(AdminSchemas.Delivery, d, json, () => `delivery ${delivery} is pending again: a worker sends it`)
  }).pipe(withWebhooks),
).pipe(Command.withDescription("Send one delivery again (under the same webhook-id)"))

const recover = Command.make(
  "recover",
  {
    subscription: subscriptionId,
    since: Flag.Date("since").pipe(Flag.withDescription("re-send the failed deliveries created since this time")),
    json,
  },
  ({ subscription, since, json }) =>
    Effect.gen(function* () {
      const job = yield* DeliveryResend.requestRecovery(subscription, since)
      if (job === undefined) return yield* new SubscriptionNotFound({ id: subscription })
      yield* print(
        AdminSchemas.RecoveryStarted,
        { job },
        json,
        () =>
          `job ${job} (webhook.recover) re-sends subscription ${subscription}'s failed deliveries since ${since.toISOString()}; a worker runs it`,
      )
    }).pipe(withWebhooks),
).pipe(Command.withDescription("Re-send a subscription's failed deliveries since a time (a job the worker runs)"))

export const deliveries = Command.make("deliveries").pipe(
  Command.withDescription("Webhook deliveries"),
  Command.withSubcommands([listDeliveries, showDelivery, resend, recover]),
)

const registrationRows = (rs: ReadonlyArray<PushRegistrations.StoredRegistration>) =>
  rs.length === 0
    ? "  none"
    : StatusReport.grid(
        ["id", "principal", "endpoint", "refreshed"],
        rs.map((r) => [r.id, r.principal, r.endpoint, r.refreshedAt.toISOString()]),
      )

const createRegistration = Command.make(
  "create",
  {
    principal: Flag.String("principal").pipe(Flag.withDescription("who receives the pushes")),
    subscription: Flag.String("subscription").pipe(
      Flag.withDescription("the browser's PushSubscription.toJSON(), as JSON"),
      Flag.withSchema(Schema.fromJsonString(Schema.Unknown)),
    ),
    json,
  },
  ({ principal, subscription, json }) =>
    Effect.gen(function* () {
      // The API's shape, as strictly as the API reads it: a misspelt key is named, never dropped.
      const input = yield* Schema.decodeUnknownEffect(AdminSchemas.PushSubscriptionJson)(subscription, {
        onExcessProperty: "error",
        errors: "all",
      }).pipe(
        Effect.mapError(
          (e) => new PushRegistration.InvalidPushRegistration({ ...firstIssue(e, "subscription"), reason: "BadShape" }),
        ),
      )
      // Registering checks the endpoint against the push-service hosts: push must be on.
      const settings = yield* PushConfig.loadOn
      const registered = yield* PushRegistrations.register(principal, input).pipe(
        Effect.provideService(PushConfig.PushConfig, settings),
      )
      yield* print(
        AdminSchemas.Registered,
        registered,
        json,
        () => `registration ${registered.id} ${registered.created ? "created" : "refreshed"} for ${principal}`,
      )
    }).pipe(withDatabase),
).pipe(Command.withDescription("Register a browser's push subscription for a principal"))

const listRegistrations = Command.make(
  "list",
  { principal: Flag.String("principal").pipe(Flag.withDescription("whose registrations")), json },
  ({ principal, json }) =>
    Effect.gen(function* () {
      const rs = yield* PushRegistrations.list(principal)
      yield* print(Schema.Array(AdminSchemas.Registration), rs, json, () => registrationRows(rs))
    }).pipe(withDatabase),
).pipe(Command.withDescription("List a principal's push registrations"))

const removeRegistration = Command.make(
  "delete",
  { id: Argument.String("id").pipe(Argument.withDescription("the registration's id")), json },
  ({ id, json }) =>
    Effect.gen(function* () {
      yield* PushRegistrations.remove(id)
      yield* json ? Console.log(JSON.stringify({ deleted: id })) : Console.log(`registration ${id} deleted`)
    }).pipe(withDatabase),
).pipe(Command.withDescription("Delete a push registration"))

export const registrations = Command.make("registrations").pipe(
  Command.withDescription("Web Push registrations"),
  Command.withSubcommands([createRegistration, listRegistrations, removeRegistration]),
)

/** The three command groups, for `bothy`'s subcommands. */
export const all = [subscriptions, deliveries, registrations] as const
