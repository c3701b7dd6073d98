/**
 * This worker's sign of life for rescue by backend (`JobBackendRescue`): the backend of the
 * process's LISTEN connection (`NotificationStream.sessions`), open for the process's whole life
 * and dropped by PostgreSQL the moment the process dies, recorded in the worker's `job_workers` row.
 *
 *   Connected(backend) ──> record it (or NULL when unknown: a pooler in between) ──> recorded:
 *     the backend fence ends (`JobFence.backendRecorded`)
 *   Lost ──> fenced at once, if a backend may be recorded (`JobFence.backendLost`): other workers
 *     put back the jobs of a worker whose backend is gone, after `JobBackendRescue.grace`
 *   a check saw this worker's recorded backend gone (its socket has not heard) ──> fenced at once,
 *     and the session is abandoned, so that a new one is made and recorded
 *   a record that fails ──> tried again after `retryDelay` (still fenced meanwhile)
 *
 * One fiber writes the records, each time the newest backend known, so the row never goes back to
 * an older one; the heartbeat's renewal never writes it (`JobLease.renew`). "May be recorded" stays
 * true from the moment a record of a backend is sent until a record of none is confirmed: a record
 * whose answer was lost may have committed.
 */
import { Cause, Clock, Duration, Effect, Option, Queue } from "effect"
import { SqlClient } from "effect/sql"
import { type Backend, NotificationStream, type SessionEvent } from "../platform/NotificationStream.ts"
import * as ThrottledWarnings from "../platform/ThrottledWarnings.ts"
import type { Gone } from "./JobBackendRescue.ts"
import type { JobFence } from "./JobFence.ts"

export interface JobLiveness {
  /** This worker's own check found its recorded backend gone. */
  readonly ownBackendGone: (gone: Gone) => Effect.Effect<void>
}

const retryDelay = Duration.millis(100)

/** Writes `backend` (none: NULL, only the lease applies) as `worker`'s recorded backend. */
export const record = Effect.fnUntraced(function* (worker: string, backend: Option.Option<Backend>) {
  const sql = yield* SqlClient.SqlClient
  const pid = Option.isSome(backend) ? backend.value.pid : null
  const started = Option.isSome(backend) ? backend.value.started : null
  yield* sql`
    UPDATE job_workers SET backend_pid = ${pid}::int, backend_start = ${started}::timestamptz WHERE id = ${worker}`
})

/** Starts recording in the current scope. */
export const make = (workerId: string, fence: JobFence) =>
  Effect.gen(function* () {
    const stream = yield* NotificationStream
    const wanted = yield* Queue.sliding<void>(1)
    // Retried every `retryDelay` while the database is away: one line a minute says so.
    const warn = ThrottledWarnings.make("1 minute")
    // The session's backend, or undefined while there is no session.
    let current: Option.Option<Backend> | undefined
    // Bumped by every session event: a record confirmed after one is not the current backend's.
    let generation = 0
    let mayBeRecorded = false

    const lose = (why: string) =>
      Effect.suspend(() =>
        mayBeRecorded ? Effect.flatMap(Clock.currentTimeMillis, (now) => fence.backendLost(now, why)) : Effect.void,
      )

    const onSession = (event: SessionEvent) =>
      Effect.suspend(() => {
        generation++
        if (event._tag === "Lost") {
          current = undefined
          return lose("lost its LISTEN connection, whose backend it recorded")
        }
        current = event.backend
        return Queue.offer(wanted, undefined).pipe(Effect.asVoid)
      })

    const recordCurrent = Effect.suspend(() => {
      const backend = current
      if (backend === undefined) return Effect.void
      const at = generation
      if (Option.isSome(backend)) mayBeRecorded = true
      return record(workerId, backend).pipe(
        Effect.andThen(
          Effect.suspend(() => {
            mayBeRecorded = Option.isSome(backend)
            if (at !== generation) return Effect.void
            return Effect.flatMap(Clock.currentTimeMillis, (now) => fence.backendRecorded(now))
          }),
        ),
        Effect.catchCause((cause) =>
          warn("record", `jobs: recording this worker's backend failed; trying again: ${Cause.pretty(cause)}`).pipe(
            Effect.andThen(Effect.sleep(retryDelay)),
            Effect.andThen(Queue.offer(wanted, undefined)),
          ),
        ),
      )
    })

    yield* Queue.take(wanted).pipe(Effect.andThen(recordCurrent), Effect.forever, Effect.forkScoped)
    yield* stream.sessions(onSession)

    const liveness: JobLiveness = {
      ownBackendGone: (gone) =>
        lose(`found its recorded backend (pid ${gone.pid}) gone from pg_stat_activity`).pipe(
          Effect.andThen(stream.abandon({ pid: gone.pid, started: gone.started })),
          Effect.andThen(Queue.offer(wanted, undefined)),
          Effect.asVoid,
        ),
    }
    return liveness
  })
