/**
 * Where a webhook delivery's time goes, read from the spans the `webhooks` consumer, the job worker
 * and the drainer already make, so nothing in src/ changes for it. A tracer given to the worker
 * side alone stamps, with `performance.now()`:
 *
 *   Consumer.round            start, end (after COMMIT) and, from the span's exit, the seqs it processed
 *   Job.run                   counted (drain runs, including those that found the slot held)
 *   WebhookDrainer.attempt   start (signing) and end (answer back), by the delivery's event seq (attribute), with its subscription
 *   OutboundSender.send        start and end, inside its attempt
 *   statements under Job.run  count and time (take, permission check, record, acquire, release)
 *
 * So an event's path splits into: commit -> round end -> its attempt starts (the drainer was woken
 * or was already running, and had sent the subscription's earlier deliveries) -> request sent ->
 * request arrived at the receiver -> answer back (the attempt goes on record later, with the next few).
 *
 * The cost is a clock read and a map write per span, against deliveries of milliseconds.
 */
import { Exit, Option, Tracer } from "effect"
import type { RoundOutcome } from "../../src/consumer/ConsumerRound.ts"

export interface Round {
  readonly start: number
  readonly end: number
  readonly fromSeq: bigint
  readonly toSeq: bigint
  readonly events: number
  readonly jobs: number
  /** The fan-out statement (`WebhookFanOut.fanOut`): deliveries, numbering, drain rows, holders. */
  readonly fanOutMs: number
  /** `Jobs.insert` of the round's jobs. */
  readonly jobsInsertMs: number
}

export interface Interval {
  readonly start: number
  readonly end: number
}

/** One delivery attempt (`WebhookDrainer.attempt`): its subscription and its spans' times. */
export interface Attempt extends Interval {
  readonly subscription: string
  /** The request (`OutboundSender.send`) inside it, when one was made. */
  readonly send?: Interval
}

/** The nearest span named `name` from `span` up (itself included), if any. */
export const ancestor = (span: Tracer.AnySpan, name: string): Tracer.AnySpan | undefined => {
  for (let p: Option.Option<Tracer.AnySpan> = Option.some(span); Option.isSome(p); ) {
    const s = p.value
    if (s._tag !== "Span") return undefined
    if (s.name === name) return s
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

/** Records rounds, drain runs, delivery attempts and statements; give the tracer to the consumer and worker only. */
export const recorder = () => {
  const rounds: Array<Round> = []
  let roundsEnded = 0
  let jobRuns = 0
  let statements = 0
  let statementMs = 0
  /** By the delivery's event seq (decimal); a retried delivery keeps its last attempt. */
  const attempts = new Map<string, Attempt>()
  const sends = new Map<Tracer.AnySpan, Interval>()
  const roundParts = new Map<Tracer.AnySpan, { fanOutMs: number; jobsInsertMs: number }>()

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
      } else if (this.name === "WebhookFanOut.fanOut" || this.name === "Jobs.insert") {
        const round = ancestor(this, "Consumer.round")
        if (round !== undefined) {
          const parts = roundParts.get(round) ?? { fanOutMs: 0, jobsInsertMs: 0 }
          if (this.name === "Jobs.insert") parts.jobsInsertMs += now - this.startedAt
          else parts.fanOutMs += now - this.startedAt
          roundParts.set(round, parts)
        }
      } else if (this.name === "Job.run") {
        jobRuns++
      } else if (this.name === "OutboundSender.send") {
        const attempt = ancestor(this, "WebhookDrainer.attempt")
        if (attempt !== undefined) sends.set(attempt, { start: this.startedAt, end: now })
      } else if (this.name === "WebhookDrainer.attempt") {
        const seq = this.attributes.get("webhook.event_seq")
        const subscription = this.attributes.get("webhook.subscription")
        const send = sends.get(this)
        sends.delete(this)
        if (typeof seq === "string" && typeof subscription === "string") {
          attempts.set(seq, { start: this.startedAt, end: now, subscription, ...(send ? { send } : {}) })
        }
      } else if (this._attributes?.has("db.query.text") && ancestor(this, "Job.run") !== undefined) {
        statements++
        statementMs += now - this.startedAt
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
    attempts,
    /** Drain job runs (every run, including those that found the slot held and ended at once). */
    jobRuns: () => jobRuns,
    /** Statements run under `Job.run`: take, permission check, record, acquire, release. */
    statements: () => ({ count: statements, ms: statementMs }),
  }
}
