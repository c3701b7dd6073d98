/**
 * The drain job: sends one subscription's pending deliveries, one at a time in seq order, as long
 * as it holds the subscription's drain slot (`DrainSlot`). The steps below are the cases of
 * `DrainStep.step` over the run's state (`DrainRunState.Run`, whose transitions its header draws):
 *
 *   acquire the slot (learning the owner) ── taken by another live job ──> done (that one sends)
 *   the owner has `maxInFlightPerOwner` runs in flight in this worker ──> snooze 0.25-1 s keeping
 *     the slot: the job slot goes to someone else's deliveries meanwhile
 *   step:
 *     boundReached (deliveries or time per run) ──> flush; snooze 0 keeping the slot (the job's
 *       timeout never fires in normal work; other subscriptions get the worker slots in turn)
 *     readWhenDry (nothing read ahead): unless the last read came back full or a round reported
 *     news, wait up to `linger` for news (keeping the slot); then `readNext`: put the 2xx answers
 *     so far on record and read up to `size` pending deliveries (with subscription, event, scope
 *     and, when `Permissions` answers in SQL, the owner's right) in ONE statement, which also
 *     numbers those it finds sendable (`WebhookNumbering`); other rights in one `allowedEach`
 *     call, their numbers in one more statement
 *       none ──> after a linger without news: `DrainSlot.release` unless something is pending
 *                after all ──> done
 *     takeNext:
 *       under a rate limit (`DrainPace`), to be sent: its turn first, 1 / rate_limit after the
 *         subscription's last request (this run's, or from the record); a wait over 1 s
 *         ──> flush; snooze for it keeping the slot
 *       mustReadAgain: its right and scope were read more than `permissionMaxAge` ago, with a
 *         request since, or it has no number (another run renumbered meanwhile)
 *         ──> giveBackNumbers of the deliveries read ahead; read again
 *       not to be sent (`DrainOutcome.settle`):
 *         subscription disabled meanwhile, or left over from before a re-enable ──> end them dead
 *         the event left the log ──> disable the subscription (`gap`)
 *         owner lacks `webhook_out.deliver` on the space, or the space left the scope
 *           ──> dead without any request and without a number; `last_delivered_seq` moves past it
 *     sendNext: build the envelope; sign; POST with the subscription's extra headers beneath ours (`WebhookEnvelope.send`; no transaction is open
 *     during the request); while the last delivery read is out, `readNext` runs alongside it
 *     (`readsAlong`), if the last read was full or a round reported news, and the endpoint
 *     answers fast enough for what it reads to be fresh when its turn comes
 *       2xx (answeredOk) ──> kept for the next record; failing clock reset; next delivery
 *       410 ──> on record with the 2xx before it; disable (`gone`)
 *       else (answeredFailed) ──> numbers read ahead given back; on record with the 2xx before
 *                it; failing clock; disable (`failing`) after 5 days, or snooze for the
 *                schedule's delay KEEPING the slot, so nothing behind it is sent meanwhile
 *
 * So a busy subscription waits for its requests, and for the database about once per read: the
 * read-ahead starts at `readAhead`, doubles while reads come back full (up to `maxReadAhead`), is
 * kept to what the endpoint's last answer time lets go out within half of `permissionMaxAge`, and
 * falls back to `readAhead` after a read that was not full (`Drain.nextSize`). A backlog drains at
 * the speed of its endpoint; a caught-up subscription costs one statement per delivery. The price:
 * a delivery's right and scope are read with it, up to `permissionMaxAge` before its request
 * (never more: then they are read again first), and 2xx answers reach the record up to one read
 * later. Whatever ends a run (a failed statement, a shutdown interrupting a request) records what
 * it can first (`DrainRun.flush`); a 2xx that missed the record is sent again by the next run,
 * with its stable `webhook-id`, before anything after it: the record only ever misses a suffix of
 * what was sent, so what is sent again comes in order.
 *
 * A delivery takes its `sequence` when it is first sent and keeps it (see WebhookNumbering.ts for
 * why numbers a run gives back cannot have gone out). The one edge: a delivery numbered by an
 * earlier run that stopped without giving it back (a crash) keeps its number even when it turns
 * out suppressed now, since that request may have gone out; the receiver sees a gap there, and the
 * delivery's record shows that attempt with outcome unknown (`DeliveriesInDoubt`), never "not sent".
 *
 * A run whose job id holds the slot continues where it stopped (after a snooze, a retry, or a
 * rescue after a crash, the same job id runs again). A drainer never fails for good: on its last
 * attempt a failure becomes a long snooze instead of a discard, so a slot is not left to a dead
 * job. Why no pending delivery is left without a drainer (no lost wake-up): see DrainSlot.ts.
 *
 * A run waiting on its endpoint holds a slot of the `webhooks` queue but no database connection,
 * so a worker runs hundreds of them (`webhook.max_in_flight`); the per-owner cap keeps one owner's
 * slow endpoints from taking them all.
 *
 * So each endpoint receives its events in seq order, one at a time, and a revoked right or a
 * removed space never blocks the queue behind it.
 */
import { Cause, Duration, Effect, Option } from "effect"
import * as JobKind from "../../jobs/JobKind.ts"
import * as WebhookMetrics from "../WebhookMetrics.ts"
import * as DeliveriesInDoubt from "./DeliveriesInDoubt.ts"
import * as Drain from "./Drain.ts"
import { DrainArgs, deliverKind } from "./DrainJob.ts"
import * as DrainNews from "./DrainNews.ts"
import { flush } from "./DrainRun.ts"
import * as RunState from "./DrainRunState.ts"
import * as DrainSlot from "./DrainSlot.ts"
import { loop } from "./DrainStep.ts"
import * as WebhookInFlight from "./WebhookInFlight.ts"

export type { DrainOptions } from "./Drain.ts"

/** How long a drainer waits after an infrastructure failure on its last job attempt. */
const lastAttemptSnooze = Duration.minutes(10)

export const makeWith = (options: Drain.DrainOptions = {}) =>
  Effect.gen(function* () {
    yield* WebhookMetrics.atZero
    const drain = yield* Drain.make(options)
    const inFlight = WebhookInFlight.make(drain.maxInFlightPerOwner)
    const listen = yield* DrainNews.subscribe(drain.linger)

    const drainSubscription = Effect.fn("WebhookDrainer.drain")(function* (
      subscriptionId: string,
      job: JobKind.JobInfo,
    ) {
      const owner = yield* DrainSlot.acquire(drain.sql, subscriptionId, job.id)
      if (owner === undefined) return
      if (!(yield* inFlight.enter(owner))) return yield* new JobKind.JobSnooze({ delay: WebhookInFlight.snooze() })
      yield* Effect.addFinalizer(() => inFlight.leave(owner))
      // Only a job's later runs can follow one that stopped unrecorded (a rescue, a release): its
      // first run skips the look-up, so a caught-up subscription's one-delivery runs pay nothing.
      if (job.attempt > 1) yield* DeliveriesInDoubt.record(drain.sql, subscriptionId, 4 * drain.maxReadAhead)
      const state = yield* RunState.make(drain, subscriptionId, job.id, job.attempt)
      const news = yield* listen(subscriptionId)
      // Whatever ends the run (a failed statement, a shutdown interrupting a request), the 2xx
      // answers already received go on record if the database takes them, and the numbers of what
      // was read and not sent go back; answers it does not take are sent again, in order, by the
      // next run.
      return yield* loop(drain, state, news).pipe(Effect.ensuring(Effect.ignore(flush(drain, state))))
    }, Effect.scoped)

    return JobKind.make({
      kind: deliverKind,
      args: DrainArgs,
      timeout: Duration.minutes(1),
      run: ({ subscription }, job) =>
        drainSubscription(subscription, job).pipe(
          // On its last attempt a drainer snoozes instead of failing: discarded, it would leave the
          // slot to a dead job and the pending deliveries waiting for the next round.
          Effect.catchCause((cause) => {
            const error = Cause.findErrorOption(cause)
            const ours = Option.isSome(error) && error.value instanceof JobKind.JobSnooze
            if (ours || Cause.hasInterrupts(cause) || job.attempt < job.maxAttempts) return Effect.failCause(cause)
            return Effect.logError(
              `webhooks: drainer of subscription ${subscription} failed on its last attempt; trying again in 10 minutes`,
              cause,
            ).pipe(Effect.andThen(Effect.fail(new JobKind.JobSnooze({ delay: lastAttemptSnooze }))))
          }),
        ),
    })
  })

export const make = makeWith()
