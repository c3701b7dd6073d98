/**
 * Where a consumer round spends its time, read from the spans it already makes, so nothing in
 * src/ changes for it: a tracer given to the consumer alone stamps, with `performance.now()`,
 * `Consumer.round`, the `sql.transaction` inside it, `EventLog.readFrom`, `Jobs.insert` and
 * each SQL statement (recognised by its text). A round then splits into consecutive phases:
 *
 *   round span ─ toBegin ─ lockAndRead ─ fanOut ─ jobsValidate ─ insertAndCursor ─ commit
 *              ─ afterCommit ─ returned to the caller
 *
 *   toBegin          span start, pool connection, BEGIN round trip
 *   lockAndRead      the statement that locks the cursor and reads the batch, and decoding its rows
 *   jobsValidate     `Jobs.insert` before its statement: validation and column arrays
 *   insertAndCursor  the statement inserting the jobs and advancing the cursor
 *   commit           COMMIT round trip, including the WAL flush
 *   afterCommit   span end, metrics, until the caller has the outcome
 *
 * The cost is a clock read and a map lookup per span, against rounds of milliseconds.
 */
import { Effect, Option, Tracer } from "effect"
import type { RoundOutcome } from "../../src/consumer/ConsumerRound.ts"

type Mark = "tx" | "readFrom" | "jobsInsert" | "read" | "insert"

export interface RoundTrace {
  readonly start: number
  /** When the `Consumer.round` span ended; NaN while it runs. */
  end: number
  readonly marks: Partial<Record<Mark, { readonly start: number; readonly end: number }>>
}

const statementMark = (text: string): Mark | undefined =>
  text.includes("INSERT INTO jobs") ? "insert" : text.includes("LEFT JOIN LATERAL") ? "read" : undefined

const spanMark: Readonly<Record<string, Mark>> = {
  "sql.transaction": "tx",
  "EventLog.readFrom": "readFrom",
  "Jobs.insert": "jobsInsert",
}

/** Records every round the tracer sees; give the tracer to the consumer only (`Effect.withTracer`). */
export const recorder = () => {
  const rounds: Array<RoundTrace> = []
  const open = new Map<Tracer.AnySpan, RoundTrace>()
  let lastEnded: RoundTrace | undefined

  const roundOf = (span: Tracer.AnySpan): RoundTrace | undefined => {
    for (let p: Option.Option<Tracer.AnySpan> = Option.some(span); Option.isSome(p); ) {
      const found = open.get(p.value)
      if (found !== undefined) return found
      p = p.value._tag === "Span" ? p.value.parent : Option.none()
    }
    return undefined
  }

  class TimedSpan extends Tracer.NativeSpan {
    readonly startedAt = performance.now()
    override end(endTime: bigint, exit: Parameters<Tracer.Span["end"]>[1]) {
      const now = performance.now()
      super.end(endTime, exit)
      const own = open.get(this)
      if (own !== undefined) {
        own.end = now
        open.delete(this)
        lastEnded = own
        return
      }
      const trace = Option.match(this.parent, { onNone: () => undefined, onSome: roundOf })
      if (trace === undefined) return
      const text = this.attributes.get("db.query.text")
      const mark = typeof text === "string" ? statementMark(text) : spanMark[this.name]
      if (mark !== undefined && trace.marks[mark] === undefined) trace.marks[mark] = { start: this.startedAt, end: now }
    }
  }

  const tracer = Tracer.make({
    span: (options) => {
      const span = new TimedSpan(options)
      if (options.name === "Consumer.round") {
        const trace: RoundTrace = { start: span.startedAt, end: Number.NaN, marks: {} }
        open.set(span, trace)
        rounds.push(trace)
      }
      return span
    },
  })

  return {
    tracer,
    /** Every round in start order. */
    rounds,
    /** The round whose span ended last: the one a caller just got the outcome of. */
    lastEnded: () => lastEnded,
  }
}

export const phaseNames = [
  "toBegin",
  "lockAndRead",
  "fanOut",
  "jobsValidate",
  "insertAndCursor",
  "commit",
  "afterCommit",
] as const

export type Phases = Record<(typeof phaseNames)[number], number>

/**
 * A round that created jobs, split into consecutive phases in ms that add up to its time from
 * span start to `returnedAt`; undefined for a round that wrote nothing (caught up, locked, failed).
 */
export const phases = (r: RoundTrace, returnedAt: number): Phases | undefined => {
  const m = r.marks
  if (!m.tx || !m.read || !m.readFrom || !m.jobsInsert || !m.insert) return undefined
  return {
    toBegin: m.read.start - r.start,
    lockAndRead: m.readFrom.end - m.read.start,
    fanOut: m.jobsInsert.start - m.readFrom.end,
    jobsValidate: m.insert.start - m.jobsInsert.start,
    insertAndCursor: m.insert.end - m.insert.start,
    commit: m.tx.end - m.insert.end,
    afterCommit: returnedAt - m.tx.end,
  }
}

/**
 * Runs `round` back to back until it is caught up, adding each round's phases (NaN for a round that
 * inserted no jobs: it has no jobs statement to split at). `recorder`'s tracer must be the rounds'.
 */
export const drain = <E, R>(round: Effect.Effect<RoundOutcome, E, R>, r: ReturnType<typeof recorder>) =>
  Effect.gen(function* () {
    let events = 0
    let jobs = 0
    let rounds = 0
    const phasesMs = Object.fromEntries(phaseNames.map((p) => [p, 0])) as Phases
    for (;;) {
      const outcome = yield* round
      const returnedAt = performance.now()
      if (outcome._tag === "CaughtUp") return { events, jobs, rounds, phasesMs }
      if (outcome._tag !== "Processed") return yield* Effect.die(`unexpected round outcome ${outcome._tag}`)
      const trace = r.lastEnded()
      const split = trace === undefined ? undefined : phases(trace, returnedAt)
      for (const p of phaseNames) phasesMs[p] += split?.[p] ?? Number.NaN
      events += outcome.events
      jobs += outcome.jobs
      rounds++
    }
  })
