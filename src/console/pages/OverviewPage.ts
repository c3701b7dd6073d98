/**
 * `/console/overview` (the operator's): the last hour at a glance. A row of facts (events, what
 * deliveries came to, what is pending, each consumer's lag now), then the charts: events numbered
 * per second, deliveries by outcome, delivery latency p50/p95, consumer lag and the oldest pending
 * delivery's age (sampled by this worker, `LagSampler`), push jobs finished. Every chart but `lag`
 * is read from the database at each request, one bucket per minute (`OverviewFigures`).
 */
import { Effect } from "effect"
import { html } from "../../admin/Html.ts"
import * as ChartFigure from "../ChartFigure.ts"
import { route } from "../ConsolePage.ts"
import * as OverviewFigures from "../data/OverviewFigures.ts"

const last = (row: ReadonlyArray<number | null> | undefined) => row?.findLast((v) => v !== null) ?? null
const rounded = (n: number | null) => (n === null ? "none" : String(Math.round(n)))

const facts = ({ facts }: OverviewFigures.Overview) => html`<ul class="overview-facts" aria-label="The last hour">
<li><span>events</span><strong data-fact="events">${facts.events}</strong></li>
<li><span>delivered</span><strong data-fact="delivered">${facts.delivered}</strong></li>
<li><span>failed attempts</span><strong data-fact="failed">${facts.failedAttempts}</strong></li>
<li><span>dead</span><strong data-fact="dead">${facts.dead}</strong></li>
<li><span>pending now</span><strong data-fact="pending">${facts.pending > OverviewFigures.pendingCap ? `more than ${OverviewFigures.pendingCap}` : facts.pending}</strong></li>
${facts.consumers.map(
  (c) =>
    html`<li><span>lag of ${c.name}</span><strong data-fact="lag-${c.name}">${c.lag}</strong> <small>${Math.round(c.pendingAgeSeconds)} s behind</small></li>`,
)}</ul>`

const charts = ({ charts, facts }: OverviewFigures.Overview) => {
  const latency = charts.latency.data
  return html`<div class="charts">
${ChartFigure.figure("events", "Events appended per second", charts.events, `${facts.events} events in the last hour`)}
${ChartFigure.figure(
  "deliveries",
  "Deliveries by outcome per minute",
  charts.deliveries,
  `${facts.delivered} delivered, ${facts.failedAttempts} failed attempts, ${facts.dead} dead`,
)}
${ChartFigure.figure(
  "latency",
  "Delivery latency, event committed to 2xx (ms)",
  charts.latency,
  `last minute with deliveries: p50 ${rounded(last(latency[1]))} ms, p95 ${rounded(last(latency[2]))} ms`,
)}
${
  facts.samples === 0
    ? ChartFigure.absent("lag", "Consumer lag and oldest pending delivery", "No sample yet: one is taken every 10 s.")
    : ChartFigure.figure(
        "lag",
        "Consumer lag (events) and oldest pending delivery (s), sampled every 10 s",
        charts.lag,
        `${facts.samples} samples kept by this worker since it started`,
      )
}
${
  charts.push === null
    ? ChartFigure.absent("push", "Push jobs finished per minute", "Push is not set up on this worker.")
    : ChartFigure.figure(
        "push",
        "Push jobs finished per minute",
        charts.push,
        "batches of messages, by how their job ended; per-message outcomes are on the Push page",
      )
}
</div>`
}

export const page = route(
  "/console/overview",
  () =>
    Effect.map(OverviewFigures.read(), (overview) => ({
      title: "Overview",
      current: "/console",
      body: html`${facts(overview)}${charts(overview)}`,
    })),
  { operatorOnly: true },
)
