/**
 * The completer: records what became of a worker's jobs, in batches, so that an outcome the
 * database refuses never holds up the others, and a worker that cannot record its outcomes gives
 * its jobs up rather than keep them `running` under a live lease.
 *
 *   take every outcome waiting (1 to 1000) -> its groups, one statement each (`JobFinalize`)
 *   write a group:
 *     written                 -> each outcome applied, or stale (the job was no longer ours)
 *     refused for its values  -> split in halves, each written in turn; an outcome alone is
 *                                written as its placeholder instead -> refused too: lost
 *     failed otherwise        -> written again after a backoff (50 ms, doubling up to 5 s)
 *   every group written -> report the batch (`onFinalized`) -> take again
 *
 * What it keeps true:
 * - A refused outcome costs the rest of its batch a few more statements (two per halving), never
 *   their record, and is itself recorded as a placeholder (`JobFinalize.placeholder`: the
 *   outcome's state if it was final, else what a rescue does) that carries none of the refused
 *   values; each one is logged at error level with its job id and counted in
 *   `bothy.jobs.outcome_placeholders`. A row that refuses even that is one that no statement of
 *   ours can change, the rescuer's included: it is logged and counted in `bothy.jobs.outcomes_lost`,
 *   for an operator to look at.
 * - No job stays `running` forever under a live lease. Failures that say nothing about the values
 *   (the database unreachable, a lock or a statement timeout, a permission) are retried without
 *   end, since giving up would lose outcomes that the database takes a moment later. But `waited`
 *   tells the worker how long the batch in hand has waited, and once that is more than a lease the
 *   worker stops renewing its lease and claiming (`JobWorker`): its lease runs out and the rescuer
 *   puts its jobs back. When the batch gets through, the worker renews and claims again; by then
 *   its outcomes of the rescued jobs are stale and change nothing.
 * - `close` ends within its grace: nothing is taken after it, and whatever is still unrecorded
 *   when the grace runs out is given up (logged at error level with the job ids, counted in
 *   `bothy.jobs.outcomes_lost`) and left to the rescuer, once the worker's lease is released or
 *   runs out.
 */
import { Cause, Clock, Duration, Effect, Exit, Fiber, Latch, Metric, Option, Queue } from "effect"
import type { SqlClient } from "effect/sql"
import { isSqlError, type SqlError } from "effect/sql/SqlError"
import { isRefusedValue, pgFailure } from "../platform/PgError.ts"
import { byStatement, type Finished, placeholder, write } from "./JobFinalize.ts"
import * as JobMetrics from "./JobMetrics.ts"

/**
 * What became of an outcome: applied; stale (the job was no longer this attempt's, so it changed
 * nothing); replaced by its placeholder, since the database refused it; lost (not recorded at all).
 */
export type Recorded = "applied" | "stale" | "placeholder" | "lost"

export interface Reported extends Finished {
  readonly recorded: Recorded
}

export interface JobCompleter {
  /** Hands an outcome over, without suspending (the end of every attempt). */
  readonly offer: (finished: Finished) => void
  /** Milliseconds that the outcomes in hand at `now` have waited to be recorded; 0 when none. */
  readonly waited: (now: number) => number
  /** Completes once no outcomes are in hand (at once when none are): the heartbeat's cue to renew. */
  readonly recorded: Effect.Effect<void>
  /** Takes no more outcomes, records those handed over within `grace`, and gives up the rest. */
  readonly close: (grace: Duration.Input) => Effect.Effect<void>
}

export interface JobCompleterOptions {
  /** Observes each batch once all of it is recorded (or lost). */
  readonly onFinalized?: ((batch: ReadonlyArray<Reported>) => Effect.Effect<void>) | undefined
}

/** One statement to write: a group of outcomes, or the placeholder of one the database refused. */
interface Write {
  readonly group: ReadonlyArray<Finished>
  readonly refused?: string
}

const describe = (f: Finished) => `job ${f.id} (attempt ${f.attempt}, ${f.outcome._tag})`

/** Why a write failed, when it failed for the values it carries; undefined: write it again as it is. */
const refusal = (cause: Cause.Cause<unknown>): string | undefined => {
  const error = Cause.findErrorOption(cause)
  if (Option.isSome(error)) {
    return isSqlError(error.value) && isRefusedValue(error.value) ? pgFailure(error.value).message : undefined
  }
  // A defect: the statement could not even be made from these outcomes (an invalid date, say).
  return Cause.hasDies(cause) ? String(Cause.squash(cause)) : undefined
}

const backoff = (failures: number) => Duration.millis(Math.min(5000, 50 * 2 ** Math.min(failures - 1, 7)))

const lose = (lost: ReadonlyArray<Finished>, message: string) =>
  Effect.andThen(Metric.update(JobMetrics.outcomesLost, lost.length), Effect.logError(message))

const attempt = (
  next: Write,
): Effect.Effect<ReadonlyArray<readonly [Finished, Recorded]>, SqlError, SqlClient.SqlClient> =>
  next.refused === undefined
    ? Effect.map(write(next.group), (ids) => next.group.map((f) => [f, ids.has(f.id) ? "applied" : "stale"] as const))
    : Effect.map(placeholder(next.group[0]!, next.refused), (state) => [
        [next.group[0]!, state === undefined ? "stale" : "placeholder"] as const,
      ])

/** Writes a batch's groups in turn, as the module header draws it; returns what became of each outcome. */
const writeAll = Effect.fnUntraced(function* (batch: ReadonlyArray<Finished>) {
  const recorded = new Map<Finished, Recorded>()
  const writes: Array<Write> = byStatement(batch).map((group) => ({ group }))
  let failures = 0
  while (writes.length > 0) {
    const next = writes[0]!
    const exit = yield* Effect.exit(attempt(next))
    if (Exit.isSuccess(exit)) {
      for (const [f, r] of exit.value) recorded.set(f, r)
      writes.shift()
      failures = 0
      continue
    }
    const refused = refusal(exit.cause)
    if (refused === undefined) {
      const delay = backoff(++failures)
      yield* Effect.logWarning(
        `jobs: recording ${next.group.length} outcomes failed; trying again in ${Duration.format(delay)}`,
        exit.cause,
      )
      yield* Effect.sleep(delay)
      continue
    }
    writes.shift()
    const only = next.group[0]!
    if (next.group.length > 1) {
      const half = Math.ceil(next.group.length / 2)
      writes.unshift({ group: next.group.slice(0, half) }, { group: next.group.slice(half) })
    } else if (next.refused === undefined) {
      yield* Effect.logError(
        `jobs: the database refused the outcome of ${describe(only)}: ${refused}; recording a placeholder instead`,
      ).pipe(Effect.annotateLogs({ "job.id": String(only.id) }))
      writes.unshift({ group: next.group, refused })
    } else {
      recorded.set(only, "lost")
      yield* lose(
        [only],
        `jobs: the database refused even the placeholder of ${describe(only)}: ${refused}; no statement can change its row, so the job stays as it is`,
      )
    }
  }
  return recorded
})

/** Counts the stale outcomes and the placeholders of a written batch. */
const count = Effect.fnUntraced(function* (recorded: ReadonlyMap<Finished, Recorded>) {
  let stale = 0
  let placeholders = 0
  for (const r of recorded.values()) {
    if (r === "stale") stale++
    else if (r === "placeholder") placeholders++
  }
  if (stale > 0) yield* Metric.update(JobMetrics.stale, stale)
  if (placeholders > 0) yield* Metric.update(JobMetrics.outcomePlaceholders, placeholders)
})

/** Starts the completer in the current scope. */
export const make = Effect.fnUntraced(function* (options: JobCompleterOptions = {}) {
  const queue = yield* Queue.unbounded<Finished, Cause.Done>()
  // Every outcome handed over and not yet recorded, so that `close` can name what it gives up.
  const outstanding = new Set<Finished>()
  let takenAt: number | undefined
  // Open while no batch is in hand.
  const idle = Latch.makeUnsafe(true)

  const record = Effect.fnUntraced(function* (batch: ReadonlyArray<Finished>) {
    takenAt = yield* Clock.currentTimeMillis
    idle.closeUnsafe()
    const recorded = yield* writeAll(batch)
    takenAt = undefined
    idle.openUnsafe()
    for (const f of batch) outstanding.delete(f)
    yield* count(recorded)
    if (options.onFinalized) yield* options.onFinalized(batch.map((f) => ({ ...f, recorded: recorded.get(f)! })))
  })

  const fiber = yield* Effect.gen(function* () {
    for (;;) yield* record(yield* Queue.takeBetween(queue, 1, 1000))
  }).pipe(
    Effect.catchIf(Cause.isDone, () => Effect.void),
    Effect.forkScoped,
  )

  const close = (grace: Duration.Input) =>
    Effect.gen(function* () {
      yield* Queue.end(queue)
      if (Option.isSome(yield* Effect.timeoutOption(Fiber.await(fiber), grace))) return
      yield* Fiber.interrupt(fiber)
      const lost = [...outstanding]
      outstanding.clear()
      yield* lose(
        lost,
        `jobs: gave up recording the outcomes of ${lost.map(describe).join(", ")} after ${Duration.format(Duration.fromInputUnsafe(grace))}; the rescuer puts these jobs back once this worker's lease is gone`,
      )
    })

  const completer: JobCompleter = {
    offer: (finished) => {
      outstanding.add(finished)
      Queue.offerUnsafe(queue, finished)
    },
    waited: (now) => (takenAt === undefined ? 0 : now - takenAt),
    recorded: idle.await,
    close,
  }
  return completer
})
