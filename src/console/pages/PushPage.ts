/**
 * `/console/push` (the operator's): push registrations of every kind (web push, APNs, FCM) with
 * what sending to each kind came to, and the registrations refreshed last. The counts of
 * registrations are the database's; the outcomes are this worker's since it started (`PushView`
 * says why), which the page says next to them.
 */
import { Effect } from "effect"
import { html } from "../../admin/Html.ts"
import * as NativeRegistration from "../../push/NativeRegistration.ts"
import { route } from "../ConsolePage.ts"
import * as PushView from "../data/PushView.ts"

type View = Effect.Success<ReturnType<typeof PushView.read>>

const kindsTable = (view: View) =>
  html`<table id="push-kinds"><thead><tr><th scope="col">kind</th><th scope="col">registrations</th><th scope="col">least recently refreshed</th>
<th scope="col">sent</th><th scope="col">failed</th><th scope="col">gone</th><th scope="col">by outcome</th></tr></thead><tbody>
${NativeRegistration.kinds.map((kind) => {
  const count = view.kinds.find((k) => k.kind === kind)
  const outcome = view.outcomes.find((o) => o.kind === kind)
  return html`<tr data-kind="${kind}"><th scope="row">${kind}</th><td class="n" data-cell="registrations">${count?.count ?? 0}</td>
<td>${count === undefined ? "" : count.oldestRefresh.toISOString()}</td>
<td class="n" data-cell="sent">${outcome?.sent ?? 0}</td><td class="n" data-cell="failed">${outcome?.failed ?? 0}</td>
<td class="n" data-cell="gone">${outcome?.gone ?? 0}</td>
<td class="mono">${outcome?.counts.map(([o, n]) => `${o} ${n}`).join(", ") ?? ""}</td></tr>`
})}</tbody></table>
<p>Sent, failed and gone count this worker's messages since it started (the database keeps no
per-message outcome; Prometheus sums the workers' <code>bothy_push_deliveries</code> and
<code>bothy_push_native_deliveries</code>). Failed counts refusals and failed attempts (${PushView.failures.join(", ")}).
Ended before a request, every kind: ${view.beforeRequest.map(([o, n]) => `${o} ${n}`).join(", ")}.</p>`

const where = (r: View["recent"][number]) =>
  r.kind === "webpush"
    ? (r.service ?? "")
    : `token …${r.tokenEnd ?? ""}${r.topic === null ? "" : ` for ${r.topic}`}${r.environment === null ? "" : ` (${r.environment})`}`

const recentTable = (view: View) =>
  view.recent.length === 0
    ? html`<p class="none">No registrations.</p>`
    : html`<table id="push-recent"><thead><tr><th scope="col">id</th><th scope="col">principal</th><th scope="col">kind</th><th scope="col">push service or device</th><th scope="col">refreshed</th></tr></thead><tbody>
${view.recent.map(
  (r) =>
    html`<tr data-registration="${r.id}"><td class="n">${r.id}</td><td>${r.principal}</td><td>${r.kind}</td><td class="mono">${where(r)}</td><td>${r.refreshedAt.toISOString()}</td></tr>`,
)}</tbody></table>`

export const page = route(
  "/console/push",
  () =>
    Effect.map(PushView.read(), (view) => ({
      title: "Push",
      current: "/console/push",
      body: html`${view.configured ? "" : html`<p class="warn">Push is not set up on this worker: registrations are kept, nothing is sent.</p>`}
<section><h2>Registrations by kind</h2>${kindsTable(view)}</section>
<section><h2>Refreshed last</h2><p>Up to ${PushView.recentLimit}, newest first; a browser's endpoint and a device's token are not shown whole (they address the device).</p>${recentTable(view)}</section>`,
    })),
  { operatorOnly: true },
)
