/**
 * The job runtime's metric names, each defined once. On the wire (`ops/MetricsEndpoint`) dots
 * become underscores and counters end in `_total`; durations are in seconds.
 */
import { Effect, Metric } from "effect"

/** Rows an insert skipped because their unique key already existed (a duplicate the key caught). */
export const insertSuppressed = Metric.counter("bothy.jobs.insert.suppressed", {
  description: "job inserts that were no-ops because the unique key already existed",
  incremental: true,
})

const attempts = (name: string, description: string) => Metric.counter(name, { description, incremental: true })

/** By `kind`. */
export const claimed = attempts("bothy.jobs.claimed", "jobs claimed by this worker")
export const completed = attempts("bothy.jobs.completed", "jobs that succeeded")
export const retried = attempts("bothy.jobs.retried", "failed attempts that will be retried")
export const discarded = attempts("bothy.jobs.discarded", "jobs given up: attempts used up, or args that do not decode")
export const cancelled = attempts("bothy.jobs.cancelled", "jobs that asked never to run again")
export const snoozed = attempts("bothy.jobs.snoozed", "jobs put off without spending an attempt")
export const stale = attempts(
  "bothy.jobs.stale_outcomes",
  "outcomes ignored because the job was no longer this attempt's",
)
export const rescued = attempts(
  "bothy.jobs.rescued",
  "running jobs put back: of workers whose backend is gone (died) or whose lease expired (hung)",
)

/** Times this worker stopped its running jobs and claims: its lease could not be renewed in time, or its backend was lost (`JobFence`). */
export const fenced = Metric.counter("bothy.jobs.fenced", {
  description: "times this worker stopped its running jobs and claims: lease not renewed in time, or backend lost",
  incremental: true,
})

/** Outcomes the database refused, recorded as their placeholder instead (see `JobCompleter`). */
export const outcomePlaceholders = Metric.counter("bothy.jobs.outcome_placeholders", {
  description: "job outcomes the database refused, recorded as a placeholder instead",
  incremental: true,
})

/** Outcomes not recorded at all: refused even as a placeholder, or given up at shutdown. */
export const outcomesLost = Metric.counter("bothy.jobs.outcomes_lost", {
  description: "job outcomes not recorded: refused even as a placeholder, or given up when shutdown ran out of time",
  incremental: true,
})

/** Runnable jobs per `queue`, sampled. */
export const queueDepth = Metric.gauge("bothy.jobs.queue_depth", { description: "runnable jobs per queue" })

/** 0.5 ms to about 4.4 minutes. */
const latencyBoundaries = Metric.exponentialBoundaries({ start: 0.0005, factor: 2, count: 20 })

/** Seconds from insert to the start of the first attempt, by `kind`. */
export const insertToStart = Metric.histogram("bothy.jobs.insert_to_start_seconds", {
  description: "seconds from a job's insert to the start of its first attempt",
  boundaries: latencyBoundaries,
})

/** Seconds an attempt ran, by `kind`. */
export const startToFinish = Metric.histogram("bothy.jobs.start_to_finish_seconds", {
  description: "seconds from the start of an attempt to its outcome",
  boundaries: latencyBoundaries,
})

/** The counters by `kind` (`attempts` above), in the order `atZero` writes them. */
const byKind = [claimed, completed, retried, discarded, cancelled, snoozed]

/** The counters without labels the worker owns. */
const unlabelled = [stale, rescued, fenced, outcomePlaceholders, outcomesLost]

/**
 * Every job-runtime series of a worker that runs `kinds` on `queues`, at 0 (histograms with no
 * observation), so that its first scrape holds them: `rate()`, `increase()` and an alert on a
 * counter see its first event instead of a series appearing with it. Writing 0 to a counter adds
 * nothing to one that has moved already.
 */
export const atZero = (kinds: ReadonlyArray<string>, queues: ReadonlyArray<string>) =>
  Effect.gen(function* () {
    yield* Effect.forEach(unlabelled, (counter) => Metric.update(counter, 0), { discard: true })
    for (const kind of kinds) {
      yield* Effect.forEach(byKind, (counter) => Metric.update(Metric.withAttributes(counter, { kind }), 0), {
        discard: true,
      })
      yield* Metric.value(Metric.withAttributes(insertToStart, { kind }))
      yield* Metric.value(Metric.withAttributes(startToFinish, { kind }))
    }
    // Sampled by the worker's maintenance soon after; 0 until then rather than absent.
    for (const queue of queues) yield* Metric.update(Metric.withAttributes(queueDepth, { queue }), 0)
  })
