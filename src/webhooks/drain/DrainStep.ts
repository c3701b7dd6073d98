/**
 * The drain loop as one `step` over the run's state (`DrainRunState.Run`, moved on only by the
 * transitions its header draws), case by case as the diagram in WebhookDrainer.ts draws it: the run bound, a dry run reading (lingering, then releasing the
 * slot), the next delivery (read again, settled or sent), and a request's answer. A step ends in
 * `next` (step again), `done` (the slot is let go or lost) or a `JobSnooze` failure (the run stops
 * keeping the slot). The decisions are pure functions of the state, beside it.
 */
import { Clock, Duration, Effect, Metric } from "effect"
import * as JobKind from "../../jobs/JobKind.ts"
import * as WebhookMetrics from "../WebhookMetrics.ts"
import type { Drain } from "./Drain.ts"
import type { News } from "./DrainNews.ts"
import { failed, recovered, settle } from "./DrainOutcome.ts"
import * as DrainPace from "./DrainPace.ts"
import { flush, giveBackNumbers, readNext, recordAnswered, withUnrecorded } from "./DrainRun.ts"
import type { Checked, Run } from "./DrainRunState.ts"
import * as RunState from "./DrainRunState.ts"
import * as DrainSlot from "./DrainSlot.ts"
import { attemptsBy, type PendingDelivery, type Sent, suppress } from "./PendingDeliveries.ts"
import { send } from "./WebhookEnvelope.ts"
import { type FailingClock, noFailures } from "./WebhookSchedule.ts"

export type Step = "next" | "done"

/** The run has had its share: deliveries (steps) or time. */
export const boundReached = (
  drain: Pick<Drain, "maxDeliveries" | "maxRunMillis">,
  run: Pick<Run, "steps" | "start">,
  now: number,
): boolean => run.steps >= drain.maxDeliveries || now - run.start >= drain.maxRunMillis

/**
 * Checked too long ago (unless the run waited for its read), or to be sent yet numbered by nobody
 * (another run renumbered meanwhile): read again before anything goes out.
 */
export const mustReadAgain = (
  next: Pick<Checked, "allowed" | "exempt" | "checkedAt"> & {
    readonly delivery: Pick<PendingDelivery, "sendable" | "sequence">
  },
  now: number,
  maxAgeMillis: number,
): boolean =>
  (next.delivery.sendable && next.allowed && next.delivery.sequence === null) ||
  (!next.exempt && now - next.checkedAt > maxAgeMillis)

/**
 * While the last delivery read is out, and more may be pending, the 2xx before it go on record and
 * the next deliveries are read (with their rights) in one statement alongside the request. Not for
 * an endpoint so slow that what is read now would be too old when its turn comes: that is read
 * after the answer instead.
 */
export const readsAlong = (
  drain: Pick<Drain, "lingers" | "maxAgeMillis">,
  run: Pick<Run, "full" | "lastRequestMillis"> & { readonly queue: ReadonlyArray<unknown> },
  fresh: boolean,
): boolean =>
  run.queue.length === 0 &&
  (!drain.lingers || run.full || fresh) &&
  (run.lastRequestMillis === undefined || 2 * run.lastRequestMillis <= drain.maxAgeMillis)

/**
 * Nothing read ahead. Unless the last read was full or a round reported news since, nothing new
 * is pending: wait for a round's news (keeping the slot) and read only then, recording the answers
 * so far with it; after `linger` without news, read once more and let go if still nothing.
 * `read`: there is a next delivery.
 */
const readWhenDry = (drain: Drain, run: Run, news: News) =>
  Effect.gen(function* () {
    const quiet = drain.lingers && !run.full && !news.fresh()
    if (quiet) yield* news.wait
    const lastChance = quiet && !news.fresh()
    RunState.queued(run, yield* readNext(drain, run, news, { seq: run.after, at: run.afterAt }, true))
    if (run.queue.length > 0) return "read" as const
    if (yield* DrainSlot.superseded(drain.sql, run.job, run.attempt)) return "done" as const
    if (drain.lingers && !lastChance) return "next" as const
    if ((yield* DrainSlot.release(drain.sql, run.subscriptionId, run.job)) !== "pending") return "done" as const
    news.mark()
    return "next" as const
  })

/** The failing clock a failed request counts on: reset by a 2xx earlier in this run. */
const clockBefore = (run: Run, d: PendingDelivery): FailingClock =>
  run.succeeded
    ? noFailures
    : { firstAt: d.failingFirstAt?.getTime() ?? null, clockAt: d.failingClockAt?.getTime() ?? null }

/** A 2xx: kept for the next record; the failing clock counts as reset; what was read along is next. */
const answeredOk = (run: Run, sent: Sent) =>
  Effect.gen(function* () {
    if (!run.succeeded) yield* recovered(run.subscriptionId, sent)
    RunState.delivered(run, sent)
    yield* attemptsBy("delivered")
    yield* Metric.update(WebhookMetrics.latency, (sent.answered - sent.delivery.occurredAt!.getTime()) / 1000)
    return "next" as const
  })

/** Anything else: numbers read ahead given back, on record with the 2xx before it, then settled or a snooze. */
const answeredFailed = (drain: Drain, run: Run, sent: Sent) =>
  Effect.gen(function* () {
    const before = clockBefore(run, sent.delivery)
    yield* giveBackNumbers(drain, run)
    RunState.undelivered(run, sent)
    const outcome = yield* withUnrecorded(run, (all) => failed(drain, run.subscriptionId, all, before))
    if (outcome._tag === "snooze") return yield* new JobKind.JobSnooze({ delay: outcome.delay })
    return "next" as const
  })

/** Sends `next` (reading the next deliveries alongside when `readsAlong`), then takes its answer. */
const sendNext = (drain: Drain, run: Run, news: News, next: Checked) =>
  Effect.gen(function* () {
    const d = next.delivery
    const readAlong = readsAlong(drain, run, news.fresh())
    // `send` fails only before its request leaves (a secret that does not open): the delivery
    // goes back to the queue, so its number is given back and it is not taken for one in doubt.
    const sending = send(drain, run, d, d.sequence!).pipe(
      Effect.tapError(() => Effect.sync(() => RunState.putBack(run, next))),
    )
    // Two fibers only when there is a read to make alongside the request.
    const sent = readAlong
      ? (yield* Effect.all(
          [
            sending,
            Effect.map(readNext(drain, run, news, { seq: d.eventSeq, at: d.occurredAt }, false), (read) =>
              RunState.readAlong(run, read),
            ),
          ],
          { concurrency: 2 },
        ))[0]
      : yield* sending
    DrainPace.sent(run, sent.started, sent.answered, d.rateLimit)
    return yield* sent.ok ? answeredOk(run, sent) : answeredFailed(drain, run, sent)
  })

/** The next delivery read: read again, settled without a request, or sent. */
const takeNext = (drain: Drain, run: Run, news: News) =>
  Effect.gen(function* () {
    const next = run.queue[0]!
    const d = next.delivery
    // Its turn first, then the age of its right: a wait for the rate limit must not send a stale one.
    if (d.sendable && next.allowed && d.rateLimit !== null) yield* DrainPace.waitTurn(drain, run, d.rateLimit)
    if (mustReadAgain(next, yield* Clock.currentTimeMillis, drain.maxAgeMillis)) {
      yield* giveBackNumbers(drain, run)
      news.mark()
      return "next" as const
    }
    RunState.taken(run)
    if (d.sendable && next.allowed) return yield* sendNext(drain, run, news, next)
    yield* recordAnswered(drain, run)
    if (d.sendable) yield* suppress(drain, run.subscriptionId, d, "permission")
    else yield* settle(drain, run, d)
    return "next" as const
  })

/** One step of the run, from the header's diagram. */
export const step = (drain: Drain, run: Run, news: News) =>
  Effect.gen(function* () {
    if (boundReached(drain, run, yield* Clock.currentTimeMillis)) {
      yield* flush(drain, run)
      return yield* new JobKind.JobSnooze({ delay: Duration.zero })
    }
    RunState.stepped(run)
    if (run.queue.length === 0) {
      const dry = yield* readWhenDry(drain, run, news)
      if (dry !== "read") return dry
    }
    return yield* takeNext(drain, run, news)
  })

/** Steps until the slot is let go (or lost), or a step snoozes. */
export const loop = (drain: Drain, run: Run, news: News) =>
  Effect.gen(function* () {
    while ((yield* step(drain, run, news)) === "next") {
      // each step leaves the run's state for the next
    }
  })
