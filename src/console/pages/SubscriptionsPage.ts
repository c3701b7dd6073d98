/**
 * `/console/subscriptions`: each subscription the viewer may see (a principal: its own), worst
 * first (disabled, degraded, least successful, oldest pending), with its health over the last
 * 24 hours and a sparkline of it, each linking to its own page.
 */
import { Effect } from "effect"
import { html } from "../../admin/Html.ts"
import { isOperator, type Viewer } from "../ConsoleLayout.ts"
import { route } from "../ConsolePage.ts"
import * as SubscriptionHealthList from "../data/SubscriptionHealthList.ts"
import { age } from "./ConsoleText.ts"
import * as Sparkline from "./Sparkline.ts"

/** The most rows the page shows; the rest are healthier than the last one shown. */
export const limit = 200

/** A principal sees its own; the operator everyone's. */
export const ownerFilter = (viewer: Viewer) =>
  viewer.caller._tag === "Principal" ? viewer.caller.principal : undefined

const stateOf = (row: SubscriptionHealthList.HealthRow) =>
  row.state === "disabled"
    ? html`<span class="bad">disabled (${row.cause})</span>`
    : row.degradedSince !== null
      ? html`<span class="warn">degraded</span>`
      : html`<span class="ok">active</span>`

const rate = (row: SubscriptionHealthList.HealthRow) =>
  row.attempts === 0
    ? html`<span class="none">no attempts</span>`
    : `${((row.succeeded / row.attempts) * 100).toFixed(1)} %`

const lastOutcome = (row: SubscriptionHealthList.HealthRow) =>
  row.lastStatus !== null ? String(row.lastStatus) : (row.lastErrorClass ?? "-")

const tableRow = (row: SubscriptionHealthList.HealthRow) => html`<tr data-subscription="${row.id}">
<td class="url"><a href="/console/subscriptions/${row.id}">${row.url}</a></td><td>${row.owner}</td><td>${stateOf(row)}</td>
<td class="n">${rate(row)}</td><td class="n">${row.p95Ms === null ? "-" : `${Math.round(row.p95Ms)} ms`}</td>
<td class="n">${lastOutcome(row)}</td>
<td class="n">${row.oldestPendingSeconds === null ? html`<span class="none">none</span>` : age(row.oldestPendingSeconds)}</td>
<td>${Sparkline.svg(row.hours)}</td></tr>`

export const page = route("/console/subscriptions", (viewer) =>
  Effect.map(SubscriptionHealthList.list(ownerFilter(viewer), limit), (rows) => ({
    title: "Subscriptions",
    current: "/console/subscriptions",
    body: html`<section class="subscriptions">
<p>${isOperator(viewer) ? "Every subscription" : "Your subscriptions"}, those that need a look first
(at most ${limit}). Figures cover the attempts of the last 24 hours.</p>
${
  rows.length === 0
    ? html`<p class="none">No subscriptions.</p>`
    : html`<table id="subscriptions"><caption>Subscriptions by health</caption><thead><tr><th scope="col">URL</th>
<th scope="col">Owner</th><th scope="col">State</th><th scope="col">Success (24 h)</th><th scope="col">p95</th>
<th scope="col">Last status</th><th scope="col">Oldest pending</th><th scope="col">Last 24 h</th></tr></thead>
<tbody>${rows.map(tableRow)}</tbody></table>`
}</section>`,
  })),
)
