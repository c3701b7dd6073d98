/**
 * Rescue by heartbeat. Every worker process keeps a `job_workers` row whose `expires_at` it pushes
 * forward every third of the lease; the jobs still `running` under a worker whose lease expired (or
 * whose row is gone) go back to `retryable`, or to `discarded` when that was their last attempt.
 * With a lease of seconds, a killed worker's jobs run again within seconds, not hours; a process
 * that dies is usually noticed sooner still, by its backend (`JobLiveness`, `JobBackendRescue`),
 * and the lease is the fallback (a hung process keeps its connections).
 *
 * A rescue sends the `jobs` NOTIFY of each queue that got jobs back, so that the fetchers claim them
 * at once rather than at their next poll.
 *
 * Leases are database time (`clock_timestamp()`), so workers on skewed clocks agree.
 */
import { Effect } from "effect"
import { SqlClient, type Statement } from "effect/sql"
import * as SqlInterval from "../platform/SqlInterval.ts"
import * as Jobs from "./Jobs.ts"

/**
 * Creates or extends this worker's lease by `leaseMillis`. It never writes the recorded backend of
 * an existing row (only `JobLiveness` does, in order); a row created here has none.
 */
export const renew = Effect.fnUntraced(function* (worker: string, leaseMillis: number) {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    INSERT INTO job_workers (id, expires_at) VALUES (${worker}, clock_timestamp() + ${SqlInterval.millis(sql, leaseMillis)})
    ON CONFLICT (id) DO UPDATE SET heartbeat_at = clock_timestamp(), expires_at = excluded.expires_at`
})

export const release = Effect.fnUntraced(function* (worker: string) {
  const sql = yield* SqlClient.SqlClient
  yield* sql`DELETE FROM job_workers WHERE id = ${worker}`
})

/** The workers whose lease has not expired: processes running now, or stopped less than a lease ago. */
export const live = Effect.fnUntraced(function* () {
  const sql = yield* SqlClient.SqlClient
  return yield* sql<{ id: string; expiresAt: Date }>`
    SELECT id, expires_at AS "expiresAt" FROM job_workers WHERE expires_at > clock_timestamp() ORDER BY id`
})

/** What a rescue sets: retryable (discarded after its last attempt), with a `rescued` error saying why. */
export const putBack = (sql: SqlClient.SqlClient, message: Statement.Fragment) => sql`
  state = CASE WHEN jobs.attempt >= jobs.max_attempts THEN 'discarded' ELSE 'retryable' END::job_state,
  finalized_at = CASE WHEN jobs.attempt >= jobs.max_attempts THEN clock_timestamp() END,
  scheduled_at = clock_timestamp(),
  errors = jobs.errors || jsonb_build_array(jsonb_build_object(
    'attempt', jobs.attempt, 'at', clock_timestamp(), 'kind', 'rescued', 'message', ${message}))`

/**
 * Puts back the jobs `running` under `worker`, claimed more than `graceMillis` ago, that it does not
 * hold (`JobsInHand`: a claim committed whose answer was lost), as a rescue does; returns their ids.
 */
export const releaseOrphans = Effect.fnUntraced(function* (
  worker: string,
  inHand: ReadonlyArray<bigint>,
  graceMillis: number,
) {
  const sql = yield* SqlClient.SqlClient
  return yield* sql<{ id: bigint }>`
    UPDATE jobs SET ${putBack(sql, sql`'worker ' || ${worker} || ' claimed this job but never got the claim''s answer (its connection was cut)'`)}
    WHERE state = 'running' AND attempted_by = ${worker}
      AND attempted_at < clock_timestamp() - ${SqlInterval.millis(sql, graceMillis)}
      AND NOT (id = ANY (${inHand.map(String)}::bigint[]))
    RETURNING id`
})

/**
 * The `jobs` NOTIFY of each queue with a job in the CTE `rescued` (columns `queue`, `state`) made
 * runnable, as a CTE named `woken`; the final SELECT must read it (`SELECT count(*) FROM woken`).
 */
export const wakeRescued = (sql: SqlClient.SqlClient) => sql`woken AS MATERIALIZED (
  SELECT pg_notify(${Jobs.channel}, queue) FROM (SELECT DISTINCT queue FROM rescued WHERE state = 'retryable') AS due
)`

/** Returns the rescued jobs' ids. */
export const rescue = Effect.fnUntraced(function* () {
  const sql = yield* SqlClient.SqlClient
  const rescued = yield* sql<{ id: bigint; state: string }>`
    WITH lost AS (
      SELECT j.id FROM jobs AS j
      WHERE j.state = 'running'
        AND NOT EXISTS (
          SELECT 1 FROM job_workers AS w WHERE w.id = j.attempted_by AND w.expires_at > clock_timestamp())
      FOR UPDATE OF j SKIP LOCKED
    ), rescued AS (
      UPDATE jobs SET ${putBack(sql, sql`'the lease of worker ' || coalesce(jobs.attempted_by, '?') || ' expired while it ran this job'`)}
      FROM lost WHERE jobs.id = lost.id
      RETURNING jobs.id, jobs.queue, jobs.state::text AS state
    ), ${wakeRescued(sql)}
    SELECT id, state FROM rescued WHERE (SELECT count(*) FROM woken) >= 0`
  yield* sql`DELETE FROM job_workers WHERE expires_at < clock_timestamp() - interval '1 hour'`
  return rescued
})
