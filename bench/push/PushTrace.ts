/**
 * Where a push's time goes, read from the spans the `push` consumer, the job worker and the
 * delivery already make, so nothing in src/ changes for it. A tracer given to the worker side alone
 * stamps, with `performance.now()`:
 *
 *   Consumer.round           start, end (its statement committed: the jobs are claimable) and the seqs it processed
 *   Job.run                  start (claimed and started) and end, by job id, for `push.deliver`
 *   PushEncryption.build     inside its Job.run: encryption (aes128gcm) and the headers, on an
 *                            encryption thread (the wait for it included); PushRequest.build
 *                            when it runs on the event loop (push.encryption_threads 0)
 *   OutboundSender.send      inside its Job.run: the request to the push service and its answer
 *
 * So a message's path splits into: commit -> round end -> its job starts -> built -> sent ->
 * arrived at the push service -> answer back (its outcome is recorded later, with others).
 *
 * The cost is a clock read and a map write per span, against deliveries of milliseconds.
 */
import { Exit, Tracer } from "effect"
import type { RoundOutcome } from "../../src/consumer/ConsumerRound.ts"
import { deliverKind } from "../../src/push/PushFanOut.ts"
import { ancestor, type Round as DeliveryRound, type Interval } from "../harness/DeliveryTrace.ts"

/** The spans that time a request's build: on an encryption thread, or on the event loop. */
const builds: ReadonlySet<string> = new Set(["PushEncryption.build", "PushRequest.build"])

/** A round that processed events (the webhook trace's, without its webhook-only phases). */
export type Round = Omit<DeliveryRound, "fanOutMs" | "jobsInsertMs">

/** One run of a `push.deliver` job (a retried job keeps its last run). */
export interface JobRun extends Interval {
  readonly build?: Interval
  readonly send?: Interval
}

/** Records the `push` rounds and the `push.deliver` runs; give the tracer to the consumer and worker only. */
export const recorder = () => {
  const rounds: Array<Round> = []
  let roundsEnded = 0
  /** By job id (decimal). */
  const runs = new Map<string, JobRun>()
  const parts = new Map<Tracer.AnySpan, { build?: Interval; send?: Interval }>()

  class TimedSpan extends Tracer.NativeSpan {
    readonly startedAt = performance.now()
    override end(endTime: bigint, exit: Parameters<Tracer.Span["end"]>[1]) {
      const now = performance.now()
      super.end(endTime, exit)
      if (this.name === "Consumer.round") {
        roundsEnded++
        // The `Consumer.round` span wraps exactly the round, so its value is the round's outcome.
        const outcome = Exit.isSuccess(exit) ? (exit.value as RoundOutcome) : undefined
        if (outcome?._tag === "Processed") {
          const { fromSeq, toSeq, events, jobs } = outcome
          rounds.push({ start: this.startedAt, end: now, fromSeq, toSeq, events, jobs })
        }
      } else if (builds.has(this.name) || this.name === "OutboundSender.send") {
        const run = ancestor(this, "Job.run")
        if (run !== undefined) {
          const p = parts.get(run) ?? {}
          p[builds.has(this.name) ? "build" : "send"] = { start: this.startedAt, end: now }
          parts.set(run, p)
        }
      } else if (this.name === "Job.run" && this.attributes.get("job.kind") === deliverKind) {
        const id = this.attributes.get("job.id")
        const p = parts.get(this)
        parts.delete(this)
        if (typeof id === "string") runs.set(id, { start: this.startedAt, end: now, ...p })
      }
    }
  }

  return {
    tracer: Tracer.make({ span: (options) => new TimedSpan(options) }),
    /** Rounds that processed events, in the order they ended. */
    rounds,
    /** Rounds of any outcome that have ended: one means the consumer's start-up round is done. */
    roundsEnded: () => roundsEnded,
    runs,
  }
}
