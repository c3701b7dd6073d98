/**
 * Rescue by backend: a worker process records in its `job_workers` row the PostgreSQL backend of
 * the connection it keeps open for its whole life (`JobLiveness`). PostgreSQL drops that backend
 * the moment the process dies, so a backend gone from `pg_stat_activity` says "dead" about a second
 * after a kill, where the lease says it after 7 to 12 s. The lease stays the fallback: a hung
 * process keeps its connections, and a worker with no backend recorded (a pooler in between) is
 * judged by its lease alone.
 *
 *   every check (`checkInterval`, in each worker's maintenance):
 *     gone = workers with a live lease whose recorded backend pg_stat_activity no longer shows
 *       (same pid AND same backend_start: a reused pid is another backend)
 *     this worker's own backend among them ──> it stops its jobs at once and reconnects (`JobLiveness`)
 *     another's, first seen now ──> remember when (this worker's Clock, and the database's time)
 *     another's, seen gone for `grace` or longer ──> put back its running jobs claimed before it was
 *       first seen (same put-back as the lease's), wake their queues
 *     no longer gone (a new backend recorded, the lease lapsed, the row removed) ──> forget it
 *
 * Why the grace, rather than "gone means dead now": a backend also goes when the process lives on
 * and only its connection died (`pg_terminate_backend`, `idle_session_timeout`, a middlebox that
 * dropped the flow). That worker stops its jobs when it learns: at once from its socket in most
 * cases (`JobLiveness`), else from its own check within `checkInterval`; the grace is longer than
 * that with room to spare, so a job never runs beside its rescued run. Jobs claimed after the
 * backend was first seen gone are left alone for the same reason (that worker is alive and puts
 * them back itself); so are jobs claimed again after a rescue's snapshot, which the `attempted_at`
 * check also keeps out of a rescue whose row lock waited for them.
 *
 * A session of another role shows `backend_start` as NULL to a role without `pg_read_all_stats`:
 * such a backend counts as present, so a pid reused by such a session only leaves the lease to act.
 */
import { Duration, Effect } from "effect"
import { SqlClient, type Statement } from "effect/sql"
import { column } from "../platform/SqlArrays.ts"
import { putBack, wakeRescued } from "./JobLease.ts"

/** How often each worker looks for gone backends. */
export const checkInterval = Duration.millis(250)

/**
 * How long a backend must have been seen gone before its worker's jobs are put back: longer than a
 * live worker needs to learn it lost its backend and stop its jobs (`checkInterval` plus a check).
 */
export const grace = Duration.millis(750)

/** A worker whose recorded backend is gone, as one check saw it. */
export interface Gone {
  readonly worker: string
  readonly pid: number
  /** `backend_start`, ISO 8601 in UTC to the microsecond (`NotificationStream.Backend`). */
  readonly started: string
  /** The database's time of the check. */
  readonly seenAt: Date
}

/** "The backend recorded in `w` still exists" (NULL `backend_start`: another role's, counted as present). */
const present = (sql: SqlClient.SqlClient): Statement.Fragment => sql`EXISTS (
  SELECT 1 FROM pg_stat_activity AS a
  WHERE a.pid = w.backend_pid AND (a.backend_start = w.backend_start OR a.backend_start IS NULL)
)`

/** The workers with a live lease whose recorded backend is gone. */
export const gone = Effect.fnUntraced(function* () {
  const sql = yield* SqlClient.SqlClient
  return yield* sql<Gone>`
    SELECT w.id AS worker, w.backend_pid AS pid,
           to_char(w.backend_start AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS started,
           clock_timestamp() AS "seenAt"
    FROM job_workers AS w
    WHERE w.backend_pid IS NOT NULL AND w.expires_at > clock_timestamp() AND NOT ${present(sql)}`
})

/**
 * Puts back the running jobs of the workers in `dead` whose row still records the same backend,
 * still gone, that they claimed before it was first seen gone; wakes their queues. Returns them.
 */
export const rescue = Effect.fnUntraced(function* (dead: ReadonlyArray<Gone>) {
  const sql = yield* SqlClient.SqlClient
  if (dead.length === 0) return []
  return yield* sql<{ id: bigint; state: string; worker: string }>`
    WITH seen AS (
      SELECT * FROM unnest(${column(dead, (d) => d.worker)}::text[], ${column(dead, (d) => d.pid)}::int[],
                           ${column(dead, (d) => d.started)}::timestamptz[], ${column(dead, (d) => d.seenAt)}::timestamptz[])
        AS s(worker, pid, started, seen_at)
    ), dead AS (
      SELECT s.worker, s.seen_at FROM seen AS s
      JOIN job_workers AS w ON w.id = s.worker AND w.backend_pid = s.pid AND w.backend_start = s.started
      WHERE NOT ${present(sql)}
    ), lost AS (
      SELECT j.id FROM jobs AS j JOIN dead AS d ON j.attempted_by = d.worker
      WHERE j.state = 'running' AND j.attempted_at < d.seen_at
      FOR UPDATE OF j SKIP LOCKED
    ), rescued AS (
      UPDATE jobs SET ${putBack(sql, sql`'the backend of worker ' || coalesce(jobs.attempted_by, '?') || ' is gone (its process died or lost its connection) while it ran this job'`)}
      FROM lost WHERE jobs.id = lost.id
      RETURNING jobs.id, jobs.queue, jobs.state::text AS state, jobs.attempted_by AS worker
    ), ${wakeRescued(sql)}
    SELECT id, state, worker FROM rescued WHERE (SELECT count(*) FROM woken) >= 0`
})

/**
 * What one worker's checks remember: when each gone backend was first seen (by its `Clock` and by
 * the database). Pure bookkeeping; `JobMaintenance` runs the checks.
 */
export const sightings = () => {
  const seen = new Map<string, { readonly gone: Gone; readonly at: number }>()
  const key = (g: Gone) => `${g.worker}\u0000${g.pid}\u0000${g.started}`
  return {
    /** Records a check's result (`now` by the Clock); returns those seen gone for `grace` or longer. */
    update: (now: number, found: ReadonlyArray<Gone>): ReadonlyArray<Gone> => {
      const current = new Set(found.map(key))
      for (const k of seen.keys()) if (!current.has(k)) seen.delete(k)
      for (const g of found) if (!seen.has(key(g))) seen.set(key(g), { gone: g, at: now })
      const graceMillis = Duration.toMillis(grace)
      return Array.from(seen.values())
        .filter((s) => now - s.at >= graceMillis)
        .map((s) => s.gone)
    },
    /** Millis until the next sighting comes of age, if any is waiting. */
    nextDue: (now: number): number | undefined => {
      let due: number | undefined
      for (const s of seen.values()) {
        const left = s.at + Duration.toMillis(grace) - now
        if (left > 0 && (due === undefined || left < due)) due = left
      }
      return due
    },
  }
}
