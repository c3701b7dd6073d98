/**
 * A subscription's drain slot (`webhook_drains.job_id`): the one job that may send its pending
 * deliveries. The `webhooks` round and the drainers meet only here, on the slot row's lock; this
 * module holds both sides of that meeting and the argument that it loses no wake-up.
 *
 * What it keeps true. No lost wake-up: once a pending delivery D is committed, either a live
 * drainer will take it or a job exists that will acquire the slot and take it. All parties meet on
 * the slot's row lock:
 * - the round that creates D upserts the subscription's drain row (`lockedCte`), so it holds the
 *   row lock until D commits, and reads the holder under it (`heldCtes`). If a live job holds the
 *   slot the round creates no job (`WebhookFanOut.skipHeld`); otherwise it creates one, committed
 *   with D.
 * - a drainer releases only inside a transaction (`release`: `webhook_drain_release` of migration
 *   0008, one round trip) that first locks the row and then, in a statement started after the lock
 *   was granted (so its snapshot includes every round that held the lock before), finds nothing
 *   pending. A release that got the lock before the round's upsert commits before the round reads
 *   the holder: the round sees the slot free and creates a job. A release that got the lock after
 *   it sees D and does not release: the drainer goes on to D.
 * - an acquirer (`acquire`) takes the same lock (a plain UPDATE when the slot is free or its own,
 *   else a locking read followed by a fresh statement judging whether the holder lives). Either it
 *   gets the slot and its next read (a later statement) sees D, or a live holder has it and, by the
 *   previous point, that holder sees D before it can let go.
 * A holder that stays live keeps running again (snooze, retry, rescue) until it releases. The
 * test `WebhookDrainNoLostWakeup` races many short rounds against finishing drainers. Numbering
 * does not enter this: drainers number on the subscription and delivery rows, never on the drain
 * row, and they never write the drain row while they send, so rounds and drainers do not wait on
 * each other.
 *
 * A slot whose job no longer exists or is completed, cancelled or discarded is free (`Jobs.isLive`).
 * A round that finds the slot taken by a live job NOTIFYs `drainChannel` with the subscription id,
 * so a drainer that ran dry and lingers goes on at once instead of letting go of the slot and a
 * new job taking it. Only a wake-up: missed, the linger just runs out.
 */
import { Effect } from "effect"
import type { SqlClient } from "effect/sql"
import * as Jobs from "../../jobs/Jobs.ts"

/** The channel on which a round tells the live drainers of its subscriptions that it added deliveries. */
export const drainChannel = "webhook_drains"

/**
 * `locked AS (...)`, after `counted (sub, first)`: the drain rows of the round's subscriptions,
 * upserted. This locks them until the round commits, and returns each holder as read under the lock.
 */
export const lockedCte = (sql: SqlClient.SqlClient) => sql`
  locked AS (
    INSERT INTO webhook_drains AS w (subscription_id)
    SELECT sub FROM counted ORDER BY sub
    ON CONFLICT (subscription_id) DO UPDATE SET job_id = w.job_id
    RETURNING w.subscription_id AS sub, w.job_id
  )`

/**
 * After `locked` and `counted`: `held` (per subscription of the round, its first seq and whether a
 * live job holds its slot, `is_held`, read under the row lock `locked` took) and `nudged`, a NOTIFY
 * on `drainChannel` for each slot so taken (sent at commit).
 *
 * Making a CTE run. PostgreSQL runs a data-modifying CTE (INSERT, UPDATE) to completion whether or
 * not anything refers to it, so those are never referred to just to run them. A plain SELECT runs
 * only as far as something reads it: one called for its side effect (`pg_notify`, `set_config`)
 * is `MATERIALIZED` and counted in the statement's final SELECT (`(SELECT count(*) FROM nudged)`),
 * which runs it whole. The webhooks statements use only these two forms.
 */
export const heldCtes = (sql: SqlClient.SqlClient) => sql`
  held AS MATERIALIZED (
    SELECT locked.sub, counted.first,
           (locked.job_id IS NOT NULL AND ${Jobs.isLive(sql, sql`locked.job_id`)}) AS is_held
    FROM locked JOIN counted ON counted.sub = locked.sub
  ), nudged AS MATERIALIZED (
    SELECT pg_notify(${drainChannel}, sub::text) FROM held WHERE is_held
  )`

/**
 * Takes the slot when it is free or already this job's, and returns the subscription's owner;
 * `undefined` when another live job holds it (or the subscription is gone).
 */
export const acquire = (sql: SqlClient.SqlClient, subscriptionId: string, job: bigint) =>
  sql<{ owner: string }>`
    UPDATE webhook_drains AS w SET job_id = ${job}
    FROM webhook_subscriptions AS s
    WHERE w.subscription_id = ${subscriptionId}::uuid AND s.id = w.subscription_id
      AND (w.job_id IS NULL OR w.job_id = ${job})
    RETURNING s.owner`.pipe(
    Effect.flatMap(([taken]) =>
      taken !== undefined ? Effect.succeed<string | undefined>(taken.owner) : takeFromDead(sql, subscriptionId, job),
    ),
  )

/** Taken by another job: under the row lock, a statement started after it judges whether the holder lives. */
const takeFromDead = (sql: SqlClient.SqlClient, subscriptionId: string, job: bigint) =>
  sql.withTransaction(
    Effect.gen(function* () {
      const [row] = yield* sql<{ jobId: bigint | null; owner: string }>`
        SELECT w.job_id AS "jobId", s.owner
        FROM webhook_drains AS w JOIN webhook_subscriptions AS s ON s.id = w.subscription_id
        WHERE w.subscription_id = ${subscriptionId}::uuid FOR UPDATE OF w`
      if (row === undefined) return undefined
      if (row.jobId !== null && row.jobId !== job) {
        const [holder] = yield* sql<{ live: boolean }>`SELECT ${Jobs.isLive(sql, row.jobId)} AS live`
        if (holder?.live === true) return undefined
      }
      yield* sql`UPDATE webhook_drains SET job_id = ${job} WHERE subscription_id = ${subscriptionId}::uuid`
      return row.owner
    }),
  )

/**
 * Lets the slot go if nothing is pending, checked under the row lock by a statement started after
 * it (see the header and `webhook_drain_release`). `pending`: keep draining; `lost`: another job
 * holds the slot.
 */
export const release = (sql: SqlClient.SqlClient, subscriptionId: string, job: bigint) =>
  sql<{ outcome: "released" | "pending" | "lost" }>`
    SELECT webhook_drain_release(${subscriptionId}::uuid, ${job}) AS outcome`.pipe(
    Effect.map((rows) => rows[0]?.outcome ?? "lost"),
  )

/**
 * A later attempt of `job` than `attempt` has been claimed: the job was rescued from a worker
 * whose lease lapsed while this run went on, and the newer run drains now. The stale run's reads
 * come back empty (`PendingDeliveries`), and it ends rather than let go of a slot it no longer
 * holds.
 */
export const superseded = (sql: SqlClient.SqlClient, job: bigint, attempt: number) =>
  sql<{ later: boolean }>`
    SELECT ${Jobs.attemptedAfter(sql, sql`${job}::bigint`, attempt)} AS later`.pipe(
    Effect.map((rows) => rows[0]?.later === true),
  )
