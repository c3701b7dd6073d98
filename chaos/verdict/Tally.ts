/**
 * The counts a chaos verdict holds to zero, and the tally each judge keeps of them: a count per
 * name and the first five examples, enough for an operator to find the rows without drowning the
 * report. A judge owns the names of its family; the verdict adds the tallies up.
 */

/** Counts that must be zero, by name. */
export interface Zeros {
  readonly duplicates_created: number
  readonly lost: number
  readonly order_violations: number
  readonly sequence_gaps: number
  readonly denied_but_delivered: number
  readonly wrongly_denied: number
  readonly jobs_left_running: number
  readonly deliveries_left_pending: number
  readonly cursors_behind_head: number
  readonly log_holes: number
  readonly committed_missing_from_log: number
  readonly rolled_back_in_log: number
  readonly gaps_unreported: number
  readonly unverified_requests: number
  readonly undecryptable_pushes: number
  readonly doubled_effects: number
  readonly sent_after_gone: number
  readonly workers_exited_unasked: number
  readonly worker_start_failures_unexplained: number
  readonly faults_not_carried_out: number
}

/** A zero count, or a figure a judge counts with examples (a documented edge, not a failure). */
export type Counted = keyof Zeros | "sequence_gaps_suppressed_after_crash"

const examplesKept = 5

export interface Tally {
  readonly counts: Partial<Record<Counted, number>>
  readonly examples: Record<string, Array<string>>
}

export const make = (): Tally => ({ counts: {}, examples: {} })

/** Counts `n` (one by default) under `name`, keeping `example` among the first few. */
export const add = (tally: Tally, name: Counted, example?: string, n = 1) => {
  tally.counts[name] = (tally.counts[name] ?? 0) + n
  if (example !== undefined) {
    const list = tally.examples[name] ?? []
    tally.examples[name] = list
    if (list.length < examplesKept) list.push(example)
  }
}

/** The tallies of several judges as one. */
export const merge = (tallies: ReadonlyArray<Tally>): Tally => {
  const all = make()
  for (const t of tallies) {
    for (const [name, n] of Object.entries(t.counts)) add(all, name as Counted, undefined, n)
    for (const [name, list] of Object.entries(t.examples))
      for (const e of list) {
        const kept = all.examples[name] ?? []
        all.examples[name] = kept
        if (kept.length < examplesKept) kept.push(e)
      }
  }
  return all
}

export const count = (tally: Tally, name: Counted) => tally.counts[name] ?? 0
