/**
 * `/console/subscriptions/:id`: a subscription's facts, what can be done to it, and its delivery
 * log. Another principal's subscription is a 404 exactly like one that does not exist
 * (`AdminAccess.subscription`).
 */
import { Effect } from "effect"
import { HttpRouter } from "effect/http"
import * as AdminAccess from "../../admin/AdminAccess.ts"
import { html } from "../../admin/Html.ts"
import { type Subscription, WebhookSubscriptions } from "../../webhooks/subscriptions/WebhookSubscriptions.ts"
import { ConsoleNotFound, route } from "../ConsolePage.ts"
import * as SubscriptionCreated from "../data/SubscriptionCreated.ts"
import { time } from "./ConsoleText.ts"
import * as DeliveryLogView from "./DeliveryLogView.ts"
import { actions } from "./SubscriptionActions.ts"

const stateOf = (s: Subscription) =>
  s.state === "disabled"
    ? html`<span class="bad">disabled (${s.disabledCause})</span>`
    : s.degradedSince !== null
      ? html`<span class="warn">degraded since ${time(s.degradedSince)}</span>`
      : html`<span class="ok">active</span>`

const list = (items: ReadonlyArray<string>, none: string) =>
  items.length === 0 ? html`<span class="none">${none}</span>` : items.join(", ")

const facts = (s: Subscription, created: Date | undefined) => html`<dl class="facts" id="facts">
<dt>URL</dt><dd class="mono">${s.url}</dd><dt>Owner</dt><dd>${s.owner}</dd>
<dt>Event types</dt><dd>${list(s.eventTypes, "every type")}</dd><dt>Scope</dt><dd>${list(s.scope, "none")}</dd>
<dt>Filter</dt><dd>${s.filter === null ? html`<span class="none">every payload</span>` : html`<code>${JSON.stringify(s.filter)}</code>`}</dd>
<dt>State</dt><dd>${stateOf(s)}</dd>
<dt>Sequence</dt><dd>last number sent ${String(s.lastSequence)}; receives events after seq ${String(s.startedSeq)}, delivered through seq ${String(s.lastDeliveredSeq)}</dd>
<dt>Extra headers</dt><dd>${list(Object.keys(s.headers), "none")}</dd>
<dt>Created</dt><dd>${time(created)}</dd></dl>`

export const page = route("/console/subscriptions/:id", (viewer, request) =>
  Effect.gen(function* () {
    const { id } = yield* HttpRouter.params
    const webhooks = yield* WebhookSubscriptions
    const s = yield* AdminAccess.subscription(webhooks, viewer.caller, id ?? "").pipe(
      Effect.catchTag("SubscriptionNotFound", () => Effect.fail(new ConsoleNotFound({ what: "That subscription" }))),
    )
    const created = yield* SubscriptionCreated.of(s.id)
    const log = yield* DeliveryLogView.view(s.id, new URL(request.url, "http://console").searchParams)
    return {
      title: `Subscription ${s.id}`,
      current: "/console/subscriptions",
      body: html`<section class="subscription">${facts(s, created)}${actions(s)}${log}</section>`,
    }
  }),
)
