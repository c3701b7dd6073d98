/**
 * A subscription's delivery log on its page: the GET filter form (state, event type, time, a
 * payload path and value), the matching deliveries newest first with a re-send each, and a link
 * to the next page. Bad input (a time that is none, a path that cannot be read, a range too
 * long) is said in the page, and nothing is read.
 */
import { Effect } from "effect"
import { html } from "../../admin/Html.ts"
import { type DeliveryState, deliveryStates } from "../../webhooks/subscriptions/WebhookDeliveries.ts"
import * as DeliveryLog from "../data/DeliveryLog.ts"
import { inputTime, parseTime, time } from "./ConsoleText.ts"

export const pageSize = 50
/** A payload search covers at most this range (from `since`, else the week before `until`). */
const searchDays = 31

type Parsed = { readonly filter: DeliveryLog.LogFilter; readonly error?: string }

/** The filter the query string asks for, or what is wrong with it. */
export const parse = (subscriptionId: string, query: URLSearchParams): Parsed => {
  const text = (name: string) => query.get(name)?.trim() || undefined
  const state = text("state")
  const since = parseTime(query.get("since"))
  const until = parseTime(query.get("until"))
  const before = text("before")
  const base = { subscriptionId, type: text("type") }
  if (state !== undefined && !deliveryStates.includes(state as DeliveryState))
    return { filter: base, error: `There is no delivery state "${state}".` }
  if (since === null || until === null) return { filter: base, error: "A time must read like 2026-12-05T14:30 (UTC)." }
  if (before !== undefined && !/^\d{1,19}$/.test(before)) return { filter: base, error: "The page cursor is no seq." }
  const filter = {
    ...base,
    state: state as DeliveryState | undefined,
    since,
    until,
    before: before === undefined ? undefined : BigInt(before),
  }
  const path = text("path")
  if (path === undefined) return { filter }
  const keys = DeliveryLog.parsePath(path)
  if (typeof keys === "string") return { filter, error: keys }
  // A payload search reads events: bound its time range (see DeliveryLog's header for the rows).
  const end = until ?? new Date()
  const start = since ?? new Date(end.getTime() - 7 * 86_400_000)
  if (end.getTime() - start.getTime() > searchDays * 86_400_000)
    return { filter, error: `A payload search covers at most ${searchDays} days: narrow since and until.` }
  return { filter: { ...filter, since: start, path: { keys, value: query.get("value") ?? "" } } }
}

const form = (
  query: URLSearchParams,
  used: DeliveryLog.LogFilter,
) => html`<form class="filters" method="get" role="search"
 aria-label="Filter deliveries"><label>State<select name="state"><option value="">any</option>${deliveryStates.map(
   (s) => html`<option${used.state === s ? html` selected` : ""}>${s}</option>`,
 )}</select></label>
<label>Event type<input name="type" value="${query.get("type") ?? ""}"></label>
<label>Since (UTC)<input type="datetime-local" name="since" step="1" value="${inputTime(used.since)}"></label>
<label>Until (UTC)<input type="datetime-local" name="until" step="1" value="${inputTime(used.until)}"></label>
<label>Payload path<input name="path" placeholder="$.order.id" value="${query.get("path") ?? ""}"></label>
<label>equals<input name="value" value="${query.get("value") ?? ""}"></label>
<button type="submit">Filter</button></form>`

const row = (d: DeliveryLog.LogRow) => html`<tr data-delivery="${d.id}">
<td><a href="/console/deliveries/${d.id}">${d.id}</a></td><td class="n">${d.eventSeq}</td><td>${d.eventType ?? html`<span class="none">gone</span>`}</td>
<td>${d.state}${d.deadReason === null ? "" : ` (${d.deadReason})`}</td><td class="n">${d.attempts}</td>
<td class="n">${d.lastStatus ?? d.lastErrorClass ?? "-"}</td><td>${time(d.createdAt)}</td>
<td><form class="inline" data-api="/v1/deliveries/${d.id}/resend" data-method="POST" data-label="Resend"
 data-confirm="Send delivery ${d.id} again?"><button type="submit" aria-label="Resend delivery ${d.id}">Resend</button></form></td></tr>`

const nextLink = (query: URLSearchParams, next: bigint) => {
  const q = new URLSearchParams(query)
  q.set("before", String(next))
  return html`<p><a class="older" href="?${q.toString()}">Older deliveries</a></p>`
}

export const view = (subscriptionId: string, query: URLSearchParams) => {
  const { filter, error } = parse(subscriptionId, query)
  const heading = html`<h2 id="log-title">Delivery log</h2>${form(query, filter)}`
  if (error !== undefined)
    return Effect.succeed(
      html`<section class="log" aria-labelledby="log-title">${heading}<p class="bad" role="alert">${error}</p></section>`,
    )
  return Effect.map(
    DeliveryLog.page(filter, pageSize),
    (found) =>
      html`<section class="log" aria-labelledby="log-title">${heading}${
        found.rows.length === 0
          ? html`<p class="none" id="no-deliveries">No deliveries match.</p>`
          : html`<table id="deliveries"><caption>Deliveries, newest first</caption><thead><tr><th scope="col">Delivery</th>
<th scope="col">Event seq</th><th scope="col">Type</th><th scope="col">State</th><th scope="col">Attempts</th>
<th scope="col">Last status</th><th scope="col">Created</th><th scope="col">Action</th></tr></thead>
<tbody>${found.rows.map(row)}</tbody></table>`
      }${found.next === null ? "" : nextLink(query, found.next)}</section>`,
  )
}
