/**
 * Where a push's time goes, read from the spans the `push` consumer, the job worker and the
 * delivery already make, so nothing in src/ changes for it. A tracer given to the worker side alone
 * stamps, with `performance.now()`:
 *
 *   Consumer.round           start, end (its statement committed: the jobs are claimable) and the seqs it processed
 *   Job.run                  start (claimed and started) and end of every attempt, by job id, for
 *                            `push.batch` (one event to a batch of registrations)
 *   PushEncryption.buildMany inside its Job.run, one per attempt: every message of the batch
 *                            encrypted (aes128gcm) with its headers, on the encryption threads (the
 *                            wait for them included); PushRequest.build, one per message, when
 *                            they run on the event loop (push.encryption_threads 0)
 *   OutboundSender.send      inside its Job.run, one per message: the request and its answer
 *
 * A batch's messages are built and sent concurrently and no span names their registration, so a
 * send is not tied to a message: the trace times each batch job (its start, its run) and each send
 * and build of it, and the push service's receipts say which registration got what, and when. So a
 * message's path splits into: commit -> round end -> its batch job starts -> arrived at the push
 * service (while the job runs) -> the job ends (answers back, progress recorded).
 *
 * The cost is a clock read and a map write per span, against deliveries of milliseconds.
 */
import { Exit, Tracer } from "effect"
import type { RoundOutcome } from "../../src/consumer/ConsumerRound.ts"
import { deliverKind } from "../../src/push/PushFanOut.ts"
import { ancestor, type Round as DeliveryRound, type Interval } from "../harness/DeliveryTrace.ts"

/** The spans that time the build of requests: a batch's on the threads, or one on the event loop. */
const builds: ReadonlySet<string> = new Set(["PushEncryption.buildMany", "PushEncryption.build", "PushRequest.build"])

/** A round that processed events (the webhook trace's, without its webhook-only phases). */
export type Round = Omit<DeliveryRound, "fanOutMs" | "jobsInsertMs">

/** One attempt of a `push.batch` job: its run, and the build and send of each message it sent. */
export interface JobRun extends Interval {
  readonly builds: ReadonlyArray<Interval>
  readonly sends: ReadonlyArray<Interval>
}

/** Records the `push` rounds and the `push.batch` attempts; give the tracer to the consumer and worker only. */
export const recorder = () => {
  const rounds: Array<Round> = []
  let roundsEnded = 0
  /** By job id (decimal): every attempt, in the order they ended. */
  const runs = new Map<string, Array<JobRun>>()
  const parts = new Map<Tracer.AnySpan, { builds: Array<Interval>; sends: Array<Interval> }>()

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
          const p = parts.get(run) ?? { builds: [], sends: [] }
          p[builds.has(this.name) ? "builds" : "sends"].push({ start: this.startedAt, end: now })
          parts.set(run, p)
        }
      } else if (this.name === "Job.run" && this.attributes.get("job.kind") === deliverKind) {
        const id = this.attributes.get("job.id")
        const p = parts.get(this)
        parts.delete(this)
        if (typeof id === "string") {
          const attempts = runs.get(id) ?? []
          attempts.push({ start: this.startedAt, end: now, builds: p?.builds ?? [], sends: p?.sends ?? [] })
          runs.set(id, attempts)
        }
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
