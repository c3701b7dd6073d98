import { Effect, Option, Schema } from "effect"
import { Command, Flag } from "effect/cli"
import * as AdminSchemas from "../admin/AdminSchemas.ts"
import * as StatusReport from "../ops/StatusReport.ts"
import * as DeliveryResend from "../webhooks/subscriptions/DeliveryResend.ts"
import * as WebhookDeliveries from "../webhooks/subscriptions/WebhookDeliveries.ts"
import { SubscriptionNotFound, WebhookSubscriptions } from "../webhooks/subscriptions/WebhookSubscriptions.ts"
import { deliveryId, json, orDash, print, subscriptionId, withWebhooks } from "./AdminCommandRuntime.ts"
import { recoveryCommands } from "./RecoveryCommands.ts"

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
  Command.withSubcommands([listDeliveries, showDelivery, resend, recover, ...recoveryCommands]),
)
