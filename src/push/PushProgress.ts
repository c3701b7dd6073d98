/**
 * The record of a push batch's progress on its job: the registrations left, written as the job's
 * args (`JobProgress`) while the batch runs, so that an attempt after a crash sends only to what no
 * write recorded as settled.
 *
 * What it keeps true: one write at a time, in order, each of everything settled so far (what is left
 * only shrinks, so a later write never gives a settled registration back); the last one, with the
 * jobs split off, after every other. A write that starts while another runs is left to the next
 * (group commit), and a write starts only once the fibers resumed in the same turn settled too:
 * as many writes as the database takes while the batch runs, never one per registration, and none
 * for the settling that leaves nothing (the job's outcome records that). Once a write finds the
 * job no longer held by this attempt (put back, claimed again), `lost` is set and nothing more is
 * written.
 *
 * Nothing is written in an attempt's first `quietStart`: a batch answered within it (a job of a
 * few registrations nearly always is) is recorded by its outcome alone, one statement instead of
 * two or three. What a crash in that window leaves unrecorded is sent again with the same key
 * (`PushMessageKey`), as any crash's unrecorded sends are. Settling during the quiet start sets
 * one timer (in the attempt's scope) that writes when it ends, for a batch still waiting then.
 */
import { Clock, Duration, Effect, Scope, Semaphore } from "effect"
import { SqlClient } from "effect/sql"
import type { SqlError } from "effect/sql/SqlError"
import type { JobInfo } from "../jobs/JobKind.ts"
import * as JobProgress from "../jobs/JobProgress.ts"
import type { Ledger } from "./PushBatch.ts"
import { type BatchArgs, batchArgsJson } from "./PushJob.ts"

/** How long an interrupted attempt may take to write what it knows before it ends. */
const lastWordTimeout = Duration.seconds(1)

/**
 * How long an attempt runs before its progress is written. Jobs of three registrations at 200
 * events/s answered in about 5 ms and wrote 1.4 times each: 22 % of the push path's statements.
 */
export const quietStart = Duration.millis(100)

export interface PushProgress {
  /** Whether a write found the job no longer held by this attempt: it must send nothing more. */
  readonly lost: () => boolean
  /**
   * After a registration settled: writes, unless a write runs (a failed write is tried again at the
   * next) or the attempt is in its quiet start (its timer writes as it ends).
   */
  readonly flush: Effect.Effect<void>
  /** When interrupted: what is known, within a bound. */
  readonly lastWord: Effect.Effect<void>
  /** The attempt's last write: `keep` as what is left, `split` as jobs of their own; `false` if lost. */
  readonly last: (
    keep: ReadonlyArray<string>,
    split: ReadonlyArray<{ readonly registrations: ReadonlyArray<string>; readonly scheduledAt: Date }>,
  ) => Effect.Effect<boolean, SqlError>
}

export const make = (sql: SqlClient.SqlClient, job: JobInfo, args: BatchArgs, ledger: Ledger) =>
  Effect.gen(function* () {
    const scope = yield* Scope.Scope
    const quietUntil = (yield* Clock.currentTimeMillis) + Duration.toMillis(quietStart)
    // Set once the clock passed `quietUntil`: the clock is not read again for every answer.
    let quietOver = false
    let timerSet = false
    // The attempt's last write was asked for: the quiet start's timer, firing after it, must not
    // write the ledger's view (which still holds the registrations split off) over it.
    let ended = false
    const writes = yield* Semaphore.make(1)
    let lost = false
    // A write is running: a flush has nothing to start (the running write's loop takes its settle).
    let writing = false
    const record = (...r: Parameters<typeof JobProgress.record>) =>
      Effect.suspend(() => {
        writing = true
        return JobProgress.record(...r)
      }).pipe(
        Effect.provideService(SqlClient.SqlClient, sql),
        Effect.map((held) => {
          lost ||= !held
          return held
        }),
        Effect.ensuring(Effect.sync(() => (writing = false))),
      )
    // `whileRunning`: a write the batch's own settling asked for. Once every registration has
    // settled, the attempt ends done or dead, and the job's outcome (`JobCompleter`, as soon as the
    // attempt returns) records that: a progress write then would be a statement for nothing.
    const writeLeft = (whileRunning: boolean): Effect.Effect<void, SqlError> =>
      Effect.suspend(() => {
        if (ledger.unrecorded === 0 || lost || (whileRunning && ledger.allSettled())) return Effect.void
        const recorded = ledger.unrecorded
        return record(job, batchArgsJson(args, ledger.left(), ledger.deaths())).pipe(
          Effect.andThen(() => {
            ledger.unrecorded -= recorded
            return writeLeft(whileRunning)
          }),
        )
      })
    const progress: PushProgress = {
      lost: () => lost,
      // After the fibers resumed with this one (answers read in the same turn) have settled too, so
      // that one write records them all: without the yield, the first answer of a turn wrote alone
      // and the rest waited for a second write (2.2 writes a job of three registrations in the push
      // benchmark at 200 events/s, 1.4 with the yield).
      flush: Effect.suspend(() => {
        if (ledger.unrecorded === 0 || lost || writing || ended) return Effect.void
        const write = () =>
          Effect.andThen(Effect.yieldNow, writes.withPermitsIfAvailable(1)(writeLeft(true))).pipe(Effect.ignore)
        if (quietOver) return write()
        if (timerSet) return Effect.void
        return Effect.flatMap(Clock.currentTimeMillis, (now) => {
          if (now >= quietUntil) {
            quietOver = true
            return write()
          }
          timerSet = true
          const later = Effect.andThen(
            Effect.sync(() => (quietOver = true)),
            Effect.suspend(() => progress.flush),
          )
          return Effect.asVoid(Effect.forkIn(Effect.delay(later, quietUntil - now), scope))
        })
      }),
      lastWord: writes
        .withPermit(writeLeft(false))
        .pipe(Effect.interruptible, Effect.timeoutOption(lastWordTimeout), Effect.ignore),
      last: (keep, split) =>
        Effect.suspend(() => {
          ended = true
          return lost
            ? Effect.succeed(false)
            : writes.withPermit(
                record(
                  job,
                  batchArgsJson(args, keep, ledger.deaths()),
                  split.map((s) => ({ args: batchArgsJson(args, s.registrations), scheduledAt: s.scheduledAt })),
                ),
              )
        }),
    }
    return progress
  })
