/**
 * One drain run's state (`Run`) and the only code that changes it. Every other module sees `Run`
 * read-only and moves it on by the transitions below, one function each, named on the arrows:
 *
 *   where the deliveries the run read stand (each in one place at a time):
 *
 *     pending ──readAlong──> incoming ──delivered──┐   (beside a request, while the queue is empty)
 *        │                                         v
 *        └──queued─────────────────────────────> queue ──taken──> out ──delivered──> unrecorded
 *                                                  ^               │ │                ^    │ ^
 *                                                  └────putBack────┘ ├──undelivered───┘    │ │
 *                                                   (it never left)  └──> settled with no  │ │
 *                                                                         request          │ │
 *        a record <──recording─────────────────────────────────────────────────────────────┘ │
 *           └──recordFailed (its statement failed: back ahead of any answer since) ───────────┘
 *
 *     queue, incoming ──dropped──> pending (their numbers given back; read again before they go)
 *
 *   `pending`, `out` (held by the step that took it), `recording` (held by the statement putting
 *   it on record) and what is settled or recorded are not in `Run`: the three places it keeps
 *   are the queue, what was read along (`incoming`) and the answers not on record (`unrecorded`).
 *
 *   what the run knows, and the transitions that write it:
 *
 *     make              a new run: nothing read, nothing answered, `after` before every delivery
 *     stepped           steps
 *     taken             after, afterAt (with the queue's head going out)
 *     dbClockSeen       dbOffsetMillis
 *     readBack          windowless, full, size (after each record-and-read statement)
 *     numbered          token (the read's numbering took the subscription's)
 *     gaveBack          token (what giving numbers back left, or unknown after a failure)
 *     delivered         succeeded (with the 2xx answer kept, and what was read along next)
 *     lastRequestFound  lastRequestAt, lastRequestKnown (from the record)
 *     paced             lastRequestAt, lastRequestKnown, lastRequestMillis (after a request)
 *     secretOpened      secrets
 *
 * What it keeps true: the answers leave `unrecorded` only for a record (`recording`), and a record
 * that fails puts them back ahead of any answer since (`recordFailed`), so they reach the record in
 * the order they came and the record only ever misses a suffix of what was sent. The queue and
 * `incoming` keep seq order: `incoming` is read only while the queue is empty, after the delivery
 * out, and joins the queue behind anything put back.
 */
import { Clock, Effect, type Redacted } from "effect"
import * as IdentityConnections from "../../outbound/IdentityConnections.ts"
import type { Drain } from "./Drain.ts"
import type { PendingDelivery, Sent } from "./PendingDeliveries.ts"

/** A pending delivery with the owner's right on its space, checked when it was read. */
export interface Checked {
  readonly delivery: PendingDelivery
  readonly allowed: boolean
  /** When the statement that read its right and scope started (by the run's `Clock`). */
  readonly checkedAt: number
  /** The first delivery of a read the run waited for: nothing happened since, however long the read took. */
  readonly exempt: boolean
  /** The token its read's numbering set, if that statement gave it its number. */
  readonly numberedBy: string | undefined
}

/** What one run keeps between its steps, as every module but this one sees it: read-only. */
export interface Run {
  readonly subscriptionId: string
  readonly job: bigint
  /**
   * The job's attempt this run is: once a later one is claimed (the job was rescued from a worker
   * whose lease lapsed while this run went on), the run reads the slot as lost and stops sending.
   */
  readonly attempt: number
  /** When the run began (by its `Clock`): it snoozes 0 after `Drain.maxRunMillis`. */
  readonly start: number
  /**
   * Keep-alive connections (one pool per TLS identity, `EndpointAccess`) and opened secrets,
   * shared by the run's requests.
   */
  readonly connections: IdentityConnections.IdentityConnections
  readonly secrets: ReadonlyMap<string, Redacted.Redacted<string>>
  /** Steps taken: it snoozes 0 after `Drain.maxDeliveries`. */
  readonly steps: number
  /** Read and checked, not sent yet, in seq order. */
  readonly queue: ReadonlyArray<Checked>
  /** Read along with the request in flight; the queue once that request is answered 2xx. */
  readonly incoming: ReadonlyArray<Checked>
  /** Answered, not on record yet, in answer (and seq) order. */
  readonly unrecorded: ReadonlyArray<Sent>
  /** The seq of the last delivery this run sent or settled: every pending one before it is on record. */
  readonly after: bigint
  /** The time of `after`'s event when known: the events of later deliveries are no older. */
  readonly afterAt: Date | null
  /** The database's clock less the run's, once a read has looked it up. */
  readonly dbOffsetMillis: number | undefined
  /** A read found a delivery whose event may lie outside its window: the next one reads without. */
  readonly windowless: boolean
  /** A 2xx in this run has reset the failing clock the deliveries were read with. */
  readonly succeeded: boolean
  /** The last read came back full: more may be pending, so read again at once. */
  readonly full: boolean
  /** Deliveries the next read asks for. */
  readonly size: number
  /** The token of the run's last numbering, while the subscription may still hold it. */
  readonly token: string | undefined
  /**
   * How long the last request took, or the rate limit's interval if longer: what the next
   * deliveries read ahead must wait for, each.
   */
  readonly lastRequestMillis: number | undefined
  /** When the subscription's last request started (by `Clock`), by this run or, once read (`DrainPace`), any before it. */
  readonly lastRequestAt: number | undefined
  /** `lastRequestAt` is known: this run sent, or read it from the record. */
  readonly lastRequestKnown: boolean
}

/** What a run is for its whole life. */
type Fixed = "subscriptionId" | "job" | "attempt" | "start" | "connections"

type Writable<T> = T extends ReadonlyArray<infer A> ? Array<A> : T extends ReadonlyMap<infer K, infer V> ? Map<K, V> : T

/** `Run` as the transitions write it; no other module names this type. */
type State = { readonly [K in Fixed]: Run[K] } & { -readonly [K in Exclude<keyof Run, Fixed>]: Writable<Run[K]> }

const state = (run: Run) => run as State

/** A run of `job`'s `attempt` on the subscription; its connections close with the scope. */
export const make = (drain: Drain, subscriptionId: string, job: bigint, attempt: number) =>
  Effect.gen(function* () {
    const start = yield* Clock.currentTimeMillis
    const initial: State = {
      subscriptionId,
      job,
      attempt,
      start,
      // Closed when the run ends: no connection outlives the run whose sends checked it.
      connections: yield* IdentityConnections.make(drain.config.policy),
      secrets: new Map(),
      steps: 0,
      queue: [],
      incoming: [],
      unrecorded: [],
      after: -1n,
      afterAt: null,
      dbOffsetMillis: undefined,
      windowless: false,
      succeeded: false,
      full: false,
      size: drain.readAhead,
      token: undefined,
      lastRequestMillis: undefined,
      lastRequestAt: undefined,
      lastRequestKnown: false,
    }
    return initial as Run
  })

/** A step begins. */
export const stepped = (run: Run): void => {
  state(run).steps++
}

/** pending ──> queue: what a read found while nothing was queued. */
export const queued = (run: Run, read: ReadonlyArray<Checked>): void => {
  state(run).queue = [...read]
}

/** pending ──> incoming: what a read beside the request in flight found. */
export const readAlong = (run: Run, read: ReadonlyArray<Checked>): void => {
  state(run).incoming = [...read]
}

/** queue ──> out: the queue's head goes out (sent or settled); every pending delivery before it is done with. */
export const taken = (run: Run): Checked => {
  const s = state(run)
  const next = s.queue.shift()!
  s.after = next.delivery.eventSeq
  s.afterAt = next.delivery.occurredAt
  return next
}

/** out ──> queue: its request never left (a secret that did not open), so it is first again. */
export const putBack = (run: Run, next: Checked): void => {
  state(run).queue.unshift(next)
}

/**
 * out ──> unrecorded, incoming ──> queue: a 2xx, kept for the next record; the failing clock
 * counts as reset; what was read along is next (read only while the queue was empty).
 */
export const delivered = (run: Run, sent: Sent): void => {
  const s = state(run)
  s.succeeded = true
  s.unrecorded.push(sent)
  s.queue = [...s.queue, ...s.incoming]
  s.incoming = []
}

/** out ──> unrecorded: any answer but a 2xx (or none), to go on record with the 2xx before it. */
export const undelivered = (run: Run, sent: Sent): void => {
  state(run).unrecorded.push(sent)
}

/** unrecorded ──> recording: the answers so far, taken for one statement that records them. */
export const recording = (run: Run): ReadonlyArray<Sent> => {
  const s = state(run)
  const sent = s.unrecorded
  s.unrecorded = []
  return sent
}

/** recording ──> unrecorded: that statement failed; they go back ahead of any answer since. */
export const recordFailed = (run: Run, sent: ReadonlyArray<Sent>): void => {
  const s = state(run)
  s.unrecorded = [...sent, ...s.unrecorded]
}

/** queue, incoming ──> pending: all read and not sent, whose numbers are to be given back. */
export const dropped = (run: Run): ReadonlyArray<Checked> => {
  const s = state(run)
  const read = [...s.queue, ...s.incoming]
  s.queue = []
  s.incoming = []
  return read
}

/** A read looked up the database's clock: its offset from the run's. */
export const dbClockSeen = (run: Run, offsetMillis: number): void => {
  state(run).dbOffsetMillis = offsetMillis
}

/** What a record-and-read statement tells the next read. */
export const readBack = (
  run: Run,
  read: { readonly windowless: boolean; readonly full: boolean; readonly size: number },
): void => {
  const s = state(run)
  s.windowless = read.windowless
  s.full = read.full
  s.size = read.size
}

/** The read's numbering set the subscription's token to `token`. */
export const numbered = (run: Run, token: string): void => {
  state(run).token = token
}

/** Giving numbers back left the subscription's token at `token`; `undefined` when unknown (it failed). */
export const gaveBack = (run: Run, token: string | undefined): void => {
  state(run).token = token
}

/** The subscription's last request's start, from the record (`undefined`: none yet). */
export const lastRequestFound = (run: Run, at: number | undefined): void => {
  const s = state(run)
  s.lastRequestAt = at
  s.lastRequestKnown = true
}

/** A request started at `started`; the next ones are paced at `millis` each. */
export const paced = (run: Run, started: number, millis: number): void => {
  const s = state(run)
  s.lastRequestAt = started
  s.lastRequestKnown = true
  s.lastRequestMillis = millis
}

/** A sealed secret opened, kept for the run's later requests. */
export const secretOpened = (run: Run, sealed: string, opened: Redacted.Redacted<string>): void => {
  state(run).secrets.set(sealed, opened)
}
