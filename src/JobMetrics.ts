/** The job runtime's metric names, each defined once. */
import { Metric } from "effect"

/** Rows an insert skipped because their unique key already existed (a duplicate the key caught). */
export const insertSuppressed = Metric.counter("bothy.jobs.insert.suppressed", {
  description: "job inserts that were no-ops because the unique key already existed",
  incremental: true,
})
