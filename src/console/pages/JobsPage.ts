/**
 * `/console/jobs` (the operator's): jobs by state and kind, then recent jobs of the states that need
 * a look (or of the state asked for, `?state=`), each with its last error and the actions that apply:
 * retry (any state but running) and cancel (one that has not started). The actions call the admin
 * API (`POST /v1/jobs/{id}/retry`, `/cancel`), which refuses a running job.
 */
import { Effect } from "effect"
import { html } from "../../admin/Html.ts"
import * as JobControl from "../../jobs/JobControl.ts"
import { route } from "../ConsolePage.ts"
import * as JobsView from "../data/JobsView.ts"

const cancellable: ReadonlyArray<string> = ["available", "scheduled", "retryable"]

const action = (job: JobControl.JobRecord, change: "retry" | "cancel") => {
  const label = `${change === "retry" ? "Retry" : "Cancel"} job ${job.id}`
  return html`<form class="inline" data-api="/v1/jobs/${job.id}/${change}" data-method="POST" data-label="${label}"
data-confirm="${change === "retry" ? `Run job ${job.id} (${job.kind}) again now?` : `Cancel job ${job.id} (${job.kind})? It will not run.`}">
<button type="submit"${change === "cancel" ? html` class="danger"` : ""} aria-label="${label}">${change === "retry" ? "Retry" : "Cancel"}</button></form>`
}

const groupsTable = (groups: ReadonlyArray<JobControl.JobGroup>) =>
  groups.length === 0
    ? html`<p class="none">No jobs.</p>`
    : html`<table id="job-groups"><thead><tr><th scope="col">kind</th><th scope="col">state</th><th scope="col">jobs</th><th scope="col">oldest in state</th></tr></thead><tbody>
${groups.map(
  (g) =>
    html`<tr data-kind="${g.kind}" data-state="${g.state}"><td class="mono">${g.kind}</td><td>${g.state}</td><td class="n">${g.count}</td><td class="n">${Math.round(g.oldestSeconds)} s</td></tr>`,
)}</tbody></table>`

const jobsTable = (jobs: ReadonlyArray<JobControl.JobRecord>) =>
  jobs.length === 0
    ? html`<p class="none">None.</p>`
    : html`<table id="jobs"><thead><tr><th scope="col">id</th><th scope="col">kind</th><th scope="col">state</th><th scope="col">attempt</th><th scope="col">scheduled</th><th scope="col">last error</th><th scope="col">actions</th></tr></thead><tbody>
${jobs.map(
  (job) => html`<tr data-job="${job.id}"><td class="n">${job.id}</td><td class="mono">${job.kind}</td>
<td data-cell="state">${job.state}</td><td class="n">${job.attempt} / ${job.maxAttempts}</td>
<td>${job.scheduledAt.toISOString()}</td><td class="mono">${JobsView.lastError(job.errors) ?? ""}</td>
<td>${job.state === "running" ? html`<span class="none">running</span>` : action(job, "retry")}${cancellable.includes(job.state) ? action(job, "cancel") : ""}</td></tr>`,
)}</tbody></table>`

const stateFilter = (state: string | undefined) => html`<form class="filters" method="get" action="/console/jobs">
<label for="jobs-state">State</label><select id="jobs-state" name="state">
<option value="">needing a look (${JobsView.lookAt.join(", ")})</option>
${JobControl.jobStates.map((s) => html`<option value="${s}"${s === state ? html` selected` : ""}>${s}</option>`)}
</select><button type="submit">Show</button></form>`

export const page = route(
  "/console/jobs",
  (_viewer, request) =>
    Effect.gen(function* () {
      const asked = new URL(request.url, "http://x").searchParams.get("state")
      const state = JobsView.isState(asked) ? asked : undefined
      const view = yield* JobsView.read(state)
      return {
        title: "Jobs",
        current: "/console/jobs",
        body: html`<section><h2>By state and kind</h2>${groupsTable(view.groups)}</section>
<section><h2>Recent jobs: ${view.states.join(", ")}</h2>
<p>Newest first, up to ${JobsView.limit} of each state.</p>${stateFilter(state)}${jobsTable(view.jobs)}</section>`,
      }
    }),
  { operatorOnly: true },
)
