/**
 * One attempt of a push batch, per registration: what became of each, what is left, and what the
 * job does next. It keeps true:
 *
 * - A registration is settled (delivered, gone, unregistered, dead) at most once, and a settled one
 *   never goes back into what is left: no later attempt, retry or split job sends to it again.
 * - What is left is what failed (to retry), what a throttled push service held back (sent or not),
 *   and what this attempt never reached (interrupted), in the batch's order.
 * - A push service's 429 holds back only its own registrations: those of other origins are sent,
 *   retried or settled as if it had not answered.
 *
 *   after the attempt, from what is left:
 *     nothing ──────────────────────────────> Done (or Dead, naming the dead, when some died)
 *     only one origin's throttled, ─────────> Snooze the job for its Retry-After (no attempt spent)
 *       nobody dead
 *     otherwise ────────────────────────────> each throttled origin split into a job of its own at its
 *                                              Retry-After; the job keeps what failed: Retry (or
 *                                              Done / Dead when nothing failed)
 */
import { Duration } from "effect"

export interface Split {
  readonly registrations: ReadonlyArray<string>
  readonly delay: Duration.Duration
}

export type Next =
  | { readonly _tag: "Done" }
  | { readonly _tag: "Dead"; readonly reason: string }
  | { readonly _tag: "Retry"; readonly reason: string }
  | { readonly _tag: "Snooze"; readonly delay: Duration.Duration }

/** What the job records (`keep` as its registrations, `split` as new jobs), then does. */
export interface Plan {
  readonly keep: ReadonlyArray<string>
  readonly split: ReadonlyArray<Split>
  readonly next: Next
}

/** How many registrations a reason names before it says "and n more". */
const named = 3

const summary = (what: string, entries: ReadonlyArray<readonly [string, string]>, of: number) => {
  const listed = entries.slice(0, named).map(([registration, reason]) => `registration ${registration}: ${reason}`)
  const more = entries.length > named ? `; and ${entries.length - named} more` : ""
  return `${entries.length} of ${of} ${what}: ${listed.join("; ")}${more}`
}

export class Ledger {
  private readonly settled = new Set<string>()
  private readonly failed = new Map<string, string>()
  private readonly dead = new Map<string, string>()
  private readonly throttled = new Map<string, { delay: Duration.Duration; registrations: Array<string> }>()
  /** Settled since the last recorded write: what a crash now would make a later attempt send again. */
  unrecorded = 0

  readonly registrations: ReadonlyArray<string>
  private readonly distinct: number

  /** `dead`: the ones an earlier attempt found dead (`BatchArgs.dead`), named again when the job ends. */
  constructor(registrations: ReadonlyArray<string>, dead: Readonly<Record<string, string>> = {}) {
    this.registrations = registrations
    this.distinct = new Set(registrations).size
    for (const [registration, reason] of Object.entries(dead)) this.dead.set(registration, reason)
  }

  /** Every registration found dead so far, this attempt or an earlier one, with why. */
  deaths(): Record<string, string> {
    return Object.fromEntries(this.dead)
  }

  settle(registration: string) {
    if (this.settled.has(registration)) return
    this.settled.add(registration)
    this.unrecorded++
  }

  die(registration: string, reason: string) {
    this.dead.set(registration, reason)
    this.settle(registration)
  }

  fail(registration: string, reason: string) {
    this.failed.set(registration, reason)
  }

  /** The push service of `origin` said to wait `delay` (the longest it said in this attempt). */
  throttle(origin: string, registration: string, delay: Duration.Duration) {
    const held = this.throttled.get(origin)
    if (held === undefined) this.throttled.set(origin, { delay, registrations: [registration] })
    else {
      held.registrations.push(registration)
      held.delay = Duration.max(held.delay, delay)
    }
  }

  /** Whether `origin` throttled this attempt: its registrations not yet sent wait with it. */
  isThrottled(origin: string) {
    return this.throttled.has(origin)
  }

  /** Whether every registration settled: the attempt's plan is then Done, or Dead naming its dead. */
  allSettled(): boolean {
    return this.settled.size === this.distinct
  }

  /** Every registration not settled, in the batch's order. */
  left(): Array<string> {
    return this.registrations.filter((r) => !this.settled.has(r))
  }

  /** What to record and do once every registration of the attempt was tried; `ttl` bounds a wait. */
  plan(ttl: Duration.Duration): Plan {
    const left = this.left()
    // Only what is left: a settled registration never goes into a split job, whatever came first.
    const waits = [...this.throttled.values()].flatMap((t) => {
      const registrations = left.filter((r) => t.registrations.includes(r))
      return registrations.length === 0 ? [] : [{ registrations, delay: Duration.min(t.delay, ttl) }]
    })
    const failed = left.filter((r) => this.failed.has(r))
    const total = new Set([...this.registrations, ...this.dead.keys()]).size
    // A snooze records no reason: with a death to name, the throttled ones go to a job of their own.
    if (failed.length === 0 && waits.length === 1 && this.dead.size === 0) {
      return { keep: waits[0]!.registrations, split: [], next: { _tag: "Snooze", delay: waits[0]!.delay } }
    }
    const dead = this.dead.size > 0 ? summary("registrations dead", [...this.dead], total) : undefined
    const next: Next =
      failed.length > 0
        ? {
            _tag: "Retry",
            reason: [
              summary(
                "registrations to retry",
                failed.map((r) => [r, this.failed.get(r)!]),
                total,
              ),
              ...(dead === undefined ? [] : [dead]),
            ].join("; "),
          }
        : dead !== undefined
          ? { _tag: "Dead", reason: dead }
          : { _tag: "Done" }
    return { keep: failed, split: waits, next }
  }
}
