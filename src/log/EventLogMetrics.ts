/** The event log's metric names (sequencing, `post_commit` mode), each defined once. */
import { Metric } from "effect"

/** Events the sequencer numbered, in this process. */
export const sequencedEvents = Metric.counter("bothy.event.log.sequenced_events", {
  description: "events the sequencer moved from event_log_pending into event_log, numbered",
  incremental: true,
})

/** Batches the sequencer committed with at least one event, in this process. */
export const sequencerBatches = Metric.counter("bothy.event.log.sequencer_batches", {
  description: "sequencer batches that numbered at least one append",
  incremental: true,
})

/** 1 while this process holds the sequencer lease, else 0. */
export const sequencerLeading = Metric.gauge("bothy.event.log.sequencer_leading", {
  description: "1 while this process holds the sequencer lease",
})

/** Committed appends waiting for the sequencer (sampled, counted up to 100,000). */
export const unsequenced = Metric.gauge("bothy.event.log.unsequenced", {
  description: "committed appends waiting in event_log_pending for the sequencer",
})

/** Age in seconds of the oldest committed append not numbered yet: the sequencer's own lag. */
export const unsequencedAge = Metric.gauge("bothy.event.log.unsequenced_age", {
  description: "age in seconds of the oldest committed append waiting for the sequencer (0 when none)",
})

/**
 * Age in seconds of the oldest open transaction that has appended: its events wait for its commit,
 * and while it lasts PostgreSQL keeps every moved pending row's dead version, so each batch scans
 * past more of them. 0 when none.
 */
export const openAppendAge = Metric.gauge("bothy.event.log.open_append_age", {
  description: "age in seconds of the oldest open transaction holding appends not yet committed (0 when none)",
})
