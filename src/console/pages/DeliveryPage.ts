/**
 * `/console/deliveries/:id`: a delivery, its event and every attempt, with the request headers
 * bothy sent (rebuilt, secrets redacted: `RequestHeaders`) and the first KiB of each answer, as
 * text. A delivery of another principal's subscription is a 404, like one that does not exist.
 */
import { Effect } from "effect"
import { HttpRouter } from "effect/http"
import * as AdminAccess from "../../admin/AdminAccess.ts"
import { html } from "../../admin/Html.ts"
import * as WebhookDeliveries from "../../webhooks/subscriptions/WebhookDeliveries.ts"
import { WebhookSubscriptions } from "../../webhooks/subscriptions/WebhookSubscriptions.ts"
import { ConsoleNotFound, route } from "../ConsolePage.ts"
import * as DeliveryEvent from "../data/DeliveryEvent.ts"
import { time } from "./ConsoleText.ts"
import * as RequestHeaders from "./RequestHeaders.ts"

/** The bytes of a response body a page shows. */
export const bodyBytes = 1024

// Cut on a character boundary: a UTF-8 continuation byte (10xxxxxx) never starts the rest.
const firstKiB = (body: string) => {
  const bytes = new TextEncoder().encode(body)
  let end = Math.min(bytes.length, bodyBytes)
  while (end < bytes.length && end > 0 && (bytes[end]! & 0xc0) === 0x80) end--
  return { text: new TextDecoder().decode(bytes.subarray(0, end)), cut: bytes.length > bodyBytes }
}

const attempt = (a: WebhookDeliveries.AttemptRecord, headers: ReadonlyArray<readonly [string, string]>) => {
  const body = a.responseBody === null ? null : firstKiB(a.responseBody)
  return html`<section class="attempt" id="attempt-${a.number}" aria-labelledby="attempt-${a.number}-title">
<h3 id="attempt-${a.number}-title">Attempt ${a.number}</h3><dl class="facts"><dt>Started</dt><dd>${time(a.startedAt)}</dd>
<dt>Duration</dt><dd>${a.durationMs} ms</dd><dt>Status</dt><dd>${a.status ?? html`<span class="none">no answer</span>`}</dd>
<dt>Error class</dt><dd>${a.errorClass ?? "-"}</dd></dl>
<table class="headers"><caption>Request headers sent</caption><thead><tr><th scope="col">Header</th><th scope="col">Value</th></tr></thead>
<tbody>${headers.map(([name, value]) => html`<tr><td class="mono">${name}</td><td class="mono">${value}</td></tr>`)}</tbody></table>
<h4>Response body${body?.cut === true || a.responseTruncated ? " (first KiB)" : ""}</h4>
${body === null ? html`<p class="none">none</p>` : html`<pre class="response">${body.text}</pre>`}</section>`
}

export const page = route("/console/deliveries/:id", (viewer) =>
  Effect.gen(function* () {
    const { id } = yield* HttpRouter.params
    const notFound = new ConsoleNotFound({ what: "That delivery" })
    if (id === undefined || !/^\d{1,18}$/.test(id)) return yield* notFound
    const found = yield* WebhookDeliveries.get(BigInt(id)).pipe(
      Effect.catchTag("DeliveryNotFound", () => Effect.fail(notFound)),
    )
    const { delivery: d, attempts } = found
    const s = yield* AdminAccess.subscription(yield* WebhookSubscriptions, viewer.caller, d.subscriptionId).pipe(
      Effect.catchTag("SubscriptionNotFound", () => Effect.fail(notFound)),
    )
    const event = yield* DeliveryEvent.of(d.id)
    return {
      title: `Delivery ${id}`,
      current: "/console/subscriptions",
      body: html`<section class="delivery"><dl class="facts" id="facts">
<dt>Subscription</dt><dd><a href="/console/subscriptions/${s.id}">${s.url}</a></dd>
<dt>State</dt><dd>${d.state}${d.deadReason === null ? "" : ` (${d.deadReason})`}</dd>
<dt>Sequence</dt><dd>${d.sequence === null ? "not sent yet" : String(d.sequence)} (epoch ${d.epoch})</dd>
<dt>Created</dt><dd>${time(d.createdAt)}</dd><dt>Finished</dt><dd>${time(d.finishedAt)}</dd></dl>
<form class="inline" data-api="/v1/deliveries/${id}/resend" data-method="POST" data-label="Resend"
 data-confirm="Send delivery ${id} again?"><button type="submit">Resend</button></form>
<h2>Event</h2>${
        event === undefined
          ? html`<p class="none">The event is no longer in the log (retention).</p>`
          : html`<dl class="facts" id="event"><dt>Type</dt><dd>${event.type}</dd><dt>Seq</dt><dd>${String(event.seq)}</dd>
<dt>Space</dt><dd>${event.space}</dd><dt>Occurred</dt><dd>${time(event.occurredAt)}</dd></dl>
<pre class="payload">${JSON.stringify(event.payload, null, 2)}</pre>`
      }
<h2>Attempts</h2>${
        attempts.length === 0
          ? html`<p class="none">No attempt yet.</p>`
          : attempts.map((a) => attempt(a, RequestHeaders.of(s, d, a.startedAt)))
      }</section>`,
    }
  }),
)
