/**
 * What the jobs page reads: jobs by state and kind (`JobControl.groups`, as `bothy status` counts
 * them), and recent jobs, newest first, through `JobControl.list`: of one state when asked, else
 * the ones an operator looks at (failed for good, waiting to retry, running), each list bounded.
 */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"
import * as JobControl from "../../jobs/JobControl.ts"

/** The states listed when none is asked for. */
export const lookAt = ["discarded", "retryable", "running"] as const satisfies ReadonlyArray<JobControl.JobState>

/** Rows per state listed. */
export const limit = 25

export const isState = (s: string | null): s is JobControl.JobState =>
  s !== null && (JobControl.jobStates as ReadonlyArray<string>).includes(s)

/** The last error a job recorded (`errors[].message`), if any. */
export const lastError = (errors: unknown) => {
  const last = Array.isArray(errors) ? (errors.at(-1) as { message?: unknown } | undefined) : undefined
  return typeof last?.message === "string" ? last.message : null
}

export const read = Effect.fn("JobsView.read")(function* (state: JobControl.JobState | undefined) {
  const sql = yield* SqlClient.SqlClient
  const groups = yield* JobControl.groups(sql)
  const states = state === undefined ? lookAt : [state]
  const pages = yield* Effect.forEach(states, (s) => JobControl.list({ state: s, limit }))
  const jobs = pages.flatMap((p) => p.jobs).sort((a, b) => (a.id < b.id ? 1 : a.id > b.id ? -1 : 0))
  return { groups, jobs, states }
})
