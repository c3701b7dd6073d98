/**
 * Where a webhook delivery's time goes, read from the spans the `webhooks` consumer and the job
 * worker already make, so nothing in src/ changes for it. A tracer given to the worker side alone
 * stamps, with `performance.now()`:
 *
 *   Consumer.round      start, end (after COMMIT) and, from the span's exit, the seqs it processed
 *   Job.run             start and end, by `job.id` (every attempt of every job, parked ones too)
 *   WebhookSender.send  start and end, by the `job.id` of the `Job.run` it ran under
 *   sql.transaction     start and end, and every statement (count and time), by `job.id` likewise
 *
 * Jobs map to deliveries and events through the database afterwards (`jobs.args.delivery`), so an
 * event's path splits into: commit -> round end -> first claim of a job for its delivery -> claim
 * of the job that sent it (later when it was parked behind the subscription's previous delivery)
 * -> request sent -> request arrived at the receiver.
 *
 * The cost is a clock read and a map write per span, against deliveries of milliseconds.
 */
import { Exit, Option, Tracer } from "effect"
import type { RoundOutcome } from "../src/ConsumerRound.ts"

export interface Round {
  readonly start: number
  readonly end: number
  readonly fromSeq: bigint
  readonly toSeq: bigint
  readonly events: number
  readonly jobs: number
  /** The fan-out statement (`WebhooksConsumer.fanOut`): deliveries, numbering, subscription row locks. */
  readonly fanOutMs: number
  /** `Jobs.insert` of the round's jobs. */
  readonly jobsInsertMs: number
}

export interface Interval {
  readonly start: number
  readonly end: number
}

/** What one job did on the database: its transactions in order, and every statement it ran. */
export interface JobWork {
  readonly transactions: Array<Interval>
  statements: number
  /** Sum of the statements' span times (from the query's start to its decoded rows). */
  statementMs: number
}

const jobIdOf = (span: Tracer.AnySpan): string | undefined => {
  for (let p: Option.Option<Tracer.AnySpan> = Option.some(span); Option.isSome(p); ) {
    const s = p.value
    if (s._tag !== "Span") return undefined
    if (s.name === "Job.run") {
      const id = s.attributes.get("job.id")
      return typeof id === "string" ? id : undefined
    }
    p = s.parent
  }
  return undefined
}

const roundOf = (span: Tracer.AnySpan): Tracer.AnySpan | undefined => {
  for (let p: Option.Option<Tracer.AnySpan> = Option.some(span); Option.isSome(p); ) {
    const s = p.value
    if (s._tag !== "Span") return undefined
    if (s.name === "Consumer.round") return s
    p = s.parent
  }
  return undefined
}

const processed = (exit: Exit.Exit<unknown, unknown>) => {
  if (!Exit.isSuccess(exit)) return undefined
  // The `Consumer.round` span wraps exactly the round, so its value is the round's outcome.
  const outcome = exit.value as RoundOutcome
  return outcome._tag === "Processed" ? outcome : undefined
}

/** Records rounds, job runs and sends; give the tracer to the consumer and worker only. */
export const recorder = () => {
  const rounds: Array<Round> = []
  let roundsEnded = 0
  const jobRuns = new Map<string, Interval>()
  const sends = new Map<string, Interval>()
  const work = new Map<string, JobWork>()
  const roundParts = new Map<Tracer.AnySpan, { fanOutMs: number; jobsInsertMs: number }>()
  const of = (id: string) => {
    let w = work.get(id)
    if (w === undefined) {
      w = { transactions: [], statements: 0, statementMs: 0 }
      work.set(id, w)
    }
    return w
  }

  class TimedSpan extends Tracer.NativeSpan {
    readonly startedAt = performance.now()
    override end(endTime: bigint, exit: Parameters<Tracer.Span["end"]>[1]) {
      const now = performance.now()
      super.end(endTime, exit)
      if (this.name === "Consumer.round") {
        roundsEnded++
        const p = processed(exit)
        const parts = roundParts.get(this)
        roundParts.delete(this)
        if (p !== undefined) {
          rounds.push({
            start: this.startedAt,
            end: now,
            fromSeq: p.fromSeq,
            toSeq: p.toSeq,
            events: p.events,
            jobs: p.jobs,
            fanOutMs: parts?.fanOutMs ?? Number.NaN,
            jobsInsertMs: parts?.jobsInsertMs ?? Number.NaN,
          })
        }
      } else if (this.name === "WebhooksConsumer.fanOut" || this.name === "Jobs.insert") {
        const round = roundOf(this)
        if (round !== undefined) {
          const parts = roundParts.get(round) ?? { fanOutMs: 0, jobsInsertMs: 0 }
          if (this.name === "Jobs.insert") parts.jobsInsertMs += now - this.startedAt
          else parts.fanOutMs += now - this.startedAt
          roundParts.set(round, parts)
        }
      } else if (this.name === "Job.run") {
        const id = this.attributes.get("job.id")
        if (typeof id === "string") jobRuns.set(id, { start: this.startedAt, end: now })
      } else if (this.name === "WebhookSender.send") {
        const id = jobIdOf(this)
        if (id !== undefined) sends.set(id, { start: this.startedAt, end: now })
      } else if (this.name === "sql.transaction") {
        const id = jobIdOf(this)
        if (id !== undefined) of(id).transactions.push({ start: this.startedAt, end: now })
      } else if (this._attributes?.has("db.query.text")) {
        const id = jobIdOf(this)
        if (id !== undefined) {
          const w = of(id)
          w.statements++
          w.statementMs += now - this.startedAt
        }
      }
    }
  }

  const tracer = Tracer.make({ span: (options) => new TimedSpan(options) })

  return {
    tracer,
    /** Rounds that processed events, in the order they ended. */
    rounds,
    /** Rounds of any outcome that have ended: one means the consumer's start-up round is done. */
    roundsEnded: () => roundsEnded,
    /** By job id (decimal). */
    jobRuns,
    /** By the id of the job that sent. */
    sends,
    /** By job id: transactions and statements run under `Job.run`. */
    work,
  }
}
