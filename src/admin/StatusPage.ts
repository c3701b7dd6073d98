/**
 * The status page at `/` of the admin server: consumers and their lag, webhook subscriptions by
 * state and cause with the age of their oldest pending delivery, the subscriptions that need a look,
 * recent delivery attempts and jobs by state, read from the database by `Status` at each request.
 *
 * Server-rendered HTML with its CSS inline and no script, so it needs no build step and no asset
 * from anywhere; it reloads itself (`<meta http-equiv="refresh">`). Everything the database holds is
 * escaped (`Html`): URLs, error texts and response bodies are other people's data. A database it
 * cannot read answers 503 with the reason, on the same page, which keeps reloading.
 */
import { Clock, Effect, Layer } from "effect"
import { HttpRouter, HttpServerRequest, HttpServerResponse } from "effect/http"
import { SqlClient } from "effect/sql"
import * as Status from "../ops/Status.ts"
import { age } from "../ops/StatusReport.ts"
import type { AdminAuthShape } from "./AdminAuth.ts"
import { type Html, html } from "./Html.ts"

export interface StatusPageOptions {
  /** Seconds between the page's reloads (default 5). */
  readonly refreshSeconds?: number
  /** Subscriptions listed one by one (default 50; the groups count them all). */
  readonly subscriptions?: number
  /** Attempts listed (default 25). */
  readonly attempts?: number
  /**
   * Who may see the page: the operator of this `AdminAuth` (the page shows every subscription);
   * absent: anyone who reaches the socket.
   */
  readonly auth?: AdminAuthShape
}

const style = `
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5rem; color: #1d2329; background: #f7f8fa; }
h1 { font-size: 1.3rem; margin: 0 0 .2rem; } h2 { font-size: 1.05rem; margin: 1.6rem 0 .5rem; }
.meta { color: #5b6670; font-size: .85rem; }
table { border-collapse: collapse; background: #fff; box-shadow: 0 0 0 1px #dde2e7; }
th, td { padding: .3rem .7rem; text-align: left; border-bottom: 1px solid #eceff2; vertical-align: top; }
th { background: #eef1f4; font-weight: 600; } td.n { text-align: right; font-variant-numeric: tabular-nums; }
td.url, td.body { font-family: ui-monospace, monospace; font-size: .8rem; max-width: 32rem; overflow-wrap: anywhere; }
.ok { color: #1b7a3d; } .bad { color: #b3261e; font-weight: 600; } .warn { color: #9a6700; }
.none { color: #5b6670; font-style: italic; }
`

const table = (header: ReadonlyArray<string>, rows: ReadonlyArray<Html>, empty: string) =>
  rows.length === 0
    ? html`<p class="none">${empty}</p>`
    : html`<table><thead><tr>${header.map((h) => html`<th>${h}</th>`)}</tr></thead><tbody>${rows}</tbody></table>`

const lagClass = (lag: number) => (lag === 0 ? "ok" : "warn")

const consumers = (list: Status.Status["consumers"]) =>
  table(
    ["consumer", "last seq", "head", "lag", "pending age", "cursor moved"],
    list.map(
      (c) => html`<tr data-consumer="${c.name}">
        <td>${c.name}</td><td class="n">${c.lastSeq}</td><td class="n">${c.head}</td>
        <td class="n ${lagClass(c.lag)}">${c.lag}</td><td class="n">${age(c.pendingAgeSeconds)}</td>
        <td>${c.updatedAt.toISOString()}</td></tr>`,
    ),
    "no consumers",
  )

const pendingAge = (seconds: number | null) => (seconds === null ? "none pending" : age(seconds))

const subscriptionGroups = (groups: Status.Status["subscriptions"]) =>
  table(
    ["state", "cause", "subscriptions", "degraded", "oldest pending delivery"],
    groups.map(
      (g) => html`<tr>
        <td class="${g.state === "active" ? "ok" : "bad"}">${g.state}</td><td>${g.cause ?? "-"}</td>
        <td class="n">${g.count}</td><td class="n ${g.degraded > 0 ? "bad" : ""}">${g.degraded}</td>
        <td class="n">${pendingAge(g.oldestPendingSeconds)}</td></tr>`,
    ),
    "no webhook subscriptions",
  )

const outcome = (status: number | null, errorClass: string | null) => {
  if (status !== null && status >= 200 && status < 300) return html`<span class="ok">${status}</span>`
  const text = [status === null ? null : String(status), errorClass].filter((t) => t !== null).join(" ")
  return html`<span class="bad">${text === "" ? "failed" : text}</span>`
}

/** `active`, `active, degraded since ...`, or `disabled (cause)`. */
const stateOf = (s: Status.SubscriptionStatus) =>
  s.state === "active"
    ? s.degradedSince === null
      ? "active"
      : `active, degraded since ${s.degradedSince.toISOString()}`
    : `${s.state}${s.cause === null ? "" : ` (${s.cause})`}`

const subscriptionRows = (list: ReadonlyArray<Status.SubscriptionStatus>) =>
  table(
    ["subscription", "owner", "url", "state", "oldest pending", "its attempts", "last outcome"],
    list.map(
      (s) => html`<tr data-subscription="${s.id}">
        <td>${s.id}</td><td>${s.owner}</td><td class="url">${s.url}</td>
        <td class="${s.state === "active" && s.degradedSince === null ? "ok" : "bad"}">${stateOf(s)}</td>
        <td class="n">${s.pending === null ? "none" : `${age(s.pending.ageSeconds)} (event ${s.pending.eventSeq})`}</td>
        <td class="n">${s.pending?.attempts ?? "-"}</td>
        <td>${s.pending === null || s.pending.attempts === 0 ? "-" : outcome(s.pending.lastStatus, s.pending.lastErrorClass)}</td></tr>`,
    ),
    "no webhook subscriptions",
  )

const attemptRows = (list: ReadonlyArray<Status.AttemptStatus>) =>
  table(
    ["started", "url", "event", "attempt", "outcome", "took", "delivery", "response"],
    list.map(
      (a) => html`<tr data-delivery="${a.deliveryId}">
        <td>${a.startedAt.toISOString()}</td><td class="url">${a.url}</td><td class="n">${a.eventSeq}</td>
        <td class="n">${a.number}</td><td>${outcome(a.status, a.errorClass)}</td>
        <td class="n">${a.durationMs} ms</td><td>${a.deliveryState}</td><td class="body">${a.responseBody}</td></tr>`,
    ),
    "no attempts yet",
  )

/** One row per kind, one column per state that any kind is in (in the states' life order). */
const jobRows = (jobs: Status.Status["jobs"]) => {
  const states = Status.jobStates.filter((state) => jobs.some((j) => j.state === state))
  const kinds = [...new Set(jobs.map((j) => j.kind))]
  return table(
    ["kind", ...states],
    kinds.map(
      (kind) =>
        html`<tr data-kind="${kind}"><td>${kind}</td>${states.map((state) => {
          const group = jobs.find((j) => j.kind === kind && j.state === state)
          return html`<td class="n">${group === undefined ? "0" : `${group.count} (oldest ${age(group.oldestSeconds)})`}</td>`
        })}</tr>`,
    ),
    "no jobs",
  )
}

const page = (refreshSeconds: number, at: Date, body: Html) => html`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="${refreshSeconds}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>bothy status</title><style>${style}</style></head>
<body><h1>bothy status</h1><p class="meta">read ${at.toISOString()}; this page reloads every ${refreshSeconds} s</p>
${body}</body></html>`

const sections = (
  status: Status.Status,
  subscriptions: ReadonlyArray<Status.SubscriptionStatus>,
  attempts: ReadonlyArray<Status.AttemptStatus>,
) => html`
<section id="consumers"><h2>Consumers</h2>${consumers(status.consumers)}</section>
<section id="subscriptions"><h2>Webhook subscriptions</h2>${subscriptionGroups(status.subscriptions)}
${subscriptions.length === 0 ? "" : html`<h2>Subscriptions, those needing a look first</h2>${subscriptionRows(subscriptions)}`}</section>
<section id="attempts"><h2>Recent delivery attempts, newest first</h2>${attemptRows(attempts)}</section>
<section id="jobs"><h2>Jobs by state</h2>${jobRows(status.jobs)}</section>
<section id="other"><h2>Push and the log</h2><p>push registrations: ${status.pushRegistrations ?? "none (push is not set up in this database)"};
event_log partitions: ${status.partitions.count} days kept, ${status.partitions.daysAhead} days ahead</p></section>`

/** The page's HTML, read now. */
export const render = Effect.fn("StatusPage.render")(function* (options: StatusPageOptions = {}) {
  const refresh = options.refreshSeconds ?? 5
  const status = yield* Status.read()
  const subscriptions = yield* Status.subscriptionList(options.subscriptions ?? 50)
  const attempts = yield* Status.recentAttempts(options.attempts ?? 25)
  return page(refresh, new Date(yield* Clock.currentTimeMillis), sections(status, subscriptions, attempts)).markup
})

const unavailable = (refreshSeconds: number, reason: string) =>
  Effect.map(
    Clock.currentTimeMillis,
    (now) =>
      page(refreshSeconds, new Date(now), html`<p class="bad">The database cannot be read: ${reason}</p>`).markup,
  )

const respond = (status: number, body: string) =>
  HttpServerResponse.text(body, { status, contentType: "text/html; charset=utf-8" })

/**
 * `GET /` as a route layer for an `HttpRouter` (the admin server mounts it); it reads through the
 * `SqlClient` the layer is built with.
 */
export const layer = (options: StatusPageOptions = {}) =>
  Layer.unwrap(
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const handler = render(options).pipe(
        Effect.map((body) => respond(200, body)),
        Effect.catch((error) =>
          Effect.map(unavailable(options.refreshSeconds ?? 5, error.message), (body) => respond(503, body)),
        ),
        Effect.provideService(SqlClient.SqlClient, sql),
      )
      const auth = options.auth
      if (auth === undefined || auth.open === true) return HttpRouter.add("GET", "/", handler)
      const refused = (status: number, why: string) =>
        HttpServerResponse.text(why, { status, headers: { "www-authenticate": "Bearer" } })
      return HttpRouter.add(
        "GET",
        "/",
        Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) =>
          auth.authenticate(request).pipe(
            Effect.flatMap((caller) =>
              caller._tag === "Operator" ? handler : Effect.succeed(refused(403, "the status page is the operator's")),
            ),
            Effect.catchTag("Unauthenticated", (e) => Effect.succeed(refused(401, e.message))),
          ),
        ),
      )
    }),
  )
