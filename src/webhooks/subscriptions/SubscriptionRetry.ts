/**
 * "Retry now" for one subscription: its drainer (the job holding its drain slot) runs at once
 * instead of at the end of its retry delay, so the pending deliveries resume in order from the
 * one that failed. The schedule itself is untouched: a failure after this waits as it would have.
 *
 * What it keeps true: nothing is sent out of order or beside a running drainer. It never starts a
 * second drainer; it makes the slot's own job runnable (`JobControl.retry`, which refuses a
 * running job), so the one drainer of the subscription is still the only sender.
 */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"
import * as JobControl from "../../jobs/JobControl.ts"

/** What a retry did: the drainer made runnable (and the state it was in), or why not. */
export type RetryNow =
  | { readonly _tag: "Resumed"; readonly job: bigint; readonly was: JobControl.JobState; readonly pending: number }
  | { readonly _tag: "Running"; readonly job: bigint; readonly pending: number }
  | { readonly _tag: "NothingPending" }
  | { readonly _tag: "Disabled"; readonly cause: string | null }

/** `undefined` when there is no such subscription. */
export const retryNow = Effect.fn("WebhookSubscriptions.retryNow")(function* (id: string) {
  const sql = yield* SqlClient.SqlClient
  const [row] = yield* sql<{ state: string; cause: string | null; job: bigint | null; pending: number }>`
    SELECT s.state, s.disabled_cause AS cause, w.job_id AS job,
           (SELECT count(*) FROM webhook_deliveries AS d
            WHERE d.subscription_id = s.id AND d.state = 'pending')::int AS pending
    FROM webhook_subscriptions AS s LEFT JOIN webhook_drains AS w ON w.subscription_id = s.id
    WHERE s.id = ${id}::uuid`
  if (row === undefined) return undefined
  if (row.state !== "active") return { _tag: "Disabled", cause: row.cause } satisfies RetryNow as RetryNow
  if (row.job === null || row.pending === 0) return { _tag: "NothingPending" } satisfies RetryNow as RetryNow
  const job = row.job
  return yield* JobControl.retry(job).pipe(
    Effect.map((was): RetryNow => ({ _tag: "Resumed", job, was, pending: row.pending })),
    Effect.catchTags({
      JobStateConflict: () => Effect.succeed<RetryNow>({ _tag: "Running", job, pending: row.pending }),
      // The slot's job finished meanwhile: its next round's drainer takes the deliveries.
      JobNotFound: () => Effect.succeed<RetryNow>({ _tag: "NothingPending" }),
    }),
  )
})
