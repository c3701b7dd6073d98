/**
 * The fetch loop of one queue (River's producer): claims jobs up to the queue's free slots (plus
 * the prefetch room) and starts them, under the queue's concurrency limit.
 *
 *   wake (NOTIFY on `jobs` with the queue's name, reconnect, poll, a freed slot after a full fetch)
 *     -> claim up to room = free slots + prefetch - held  (none while outcomes are stuck or the
 *        worker is fenced)
 *     -> each claimed job: a free slot starts it, or it is held (fenced meanwhile: all go back
 *        unstarted)
 *     -> a full claim (mayHaveMore) claims again; a short one waits for the next wake
 *   slot: run its job (`JobExecutor`), then the held ones in turn -> none left: free the slot
 *     (fenced: the held jobs go back unstarted, Release)
 *   fence ends (`JobFence.onLive`): wake
 *   stop: no more claims or starts; the held jobs go back unstarted (Release)
 *
 * Wake-ups coalesce in a one-slot queue: the first notification starts a fetch at once, and any
 * number arriving during it cause exactly one more; there is no fixed cooldown.
 *
 * With prefetch, held jobs are claimed like running ones (attempt counted, this worker's lease
 * covers them). Refetching waits until at most half the prefetch (`lowWater`) is left, so that
 * claims stay large. A slot's fiber runs its job, then any held ones, and frees the slot when none
 * is left: no fiber per job. Without prefetch a job starts at once, inside the claiming fiber; with
 * it, through the scheduler, so that the fetcher can send the next claim while the held jobs run.
 */
import { Clock, type Duration, Effect, Exit, Fiber, FiberSet, Queue, type Tracer } from "effect"
import { NotificationStream } from "../platform/NotificationStream.ts"
import { type ClaimedJob, claim } from "./JobClaim.ts"
import type { JobCompleter } from "./JobCompleter.ts"
import type { JobExecutor } from "./JobExecutor.ts"
import type { JobFence } from "./JobFence.ts"
import { errorOf } from "./JobOutcome.ts"
import * as Jobs from "./Jobs.ts"
import type { JobsInHand } from "./JobsInHand.ts"

export interface QueueOptions {
  /** Jobs of this queue that run at once in this worker. */
  readonly concurrency: number
  /**
   * Claimed jobs this worker may hold beyond its free slots, each waiting for a slot. Default 0:
   * claim only up to the free slots. See `JobWorker`'s header for the trade-off.
   */
  readonly prefetch?: number
}

/** What every queue's fetcher of a worker shares. */
export interface FetcherContext<R> {
  readonly workerId: string
  readonly executor: JobExecutor<R>
  readonly completer: JobCompleter
  /** True while the outcomes in hand are stuck: claim nothing then (see `JobMaintenance`). */
  readonly outcomesStuck: (now: number) => boolean
  /** While it holds, claim and start nothing: the lease may lapse soon. */
  readonly fence: JobFence
  readonly inHand: JobsInHand
  readonly pollInterval: Duration.Input
}

export interface JobFetcher {
  /** The slots' fibers, for shutdown to await and then interrupt. */
  readonly jobs: FiberSet.FiberSet<unknown, unknown>
  /** Stops claiming and starting; the held jobs never started, so they go back at once. */
  readonly stop: Effect.Effect<void>
  readonly running: () => number
}

interface Held {
  readonly job: ClaimedJob
  readonly claimedAt: number
}

/** One queue's loop state. `held` is non-empty only while every slot is busy. */
interface State {
  readonly queue: string
  readonly concurrency: number
  readonly prefetch: number
  readonly lowWater: number
  readonly held: Array<Held>
  running: number
  mayHaveMore: boolean
  stopping: boolean
  /** A slot asked for a refill. */
  refilling: boolean
  /** A claim is in flight. */
  claiming: boolean
}

type Start<R> = (job: ClaimedJob, claimedAt: number) => Effect.Effect<unknown, never, R>

/** Puts claimed jobs back unstarted, their attempt not spent. */
const giveBack = (jobs: Iterable<ClaimedJob>, completer: JobCompleter, why: string, now: number) => {
  for (const job of jobs) {
    const error = errorOf(job, "interrupted", why, now)
    completer.offer({ id: job.id, attempt: job.attempt, outcome: { _tag: "Release", at: new Date(now), error } })
  }
}

const fencedBeforeStart = "the worker's lease could not be renewed before it started the job"

/** The held job a freed slot starts next: none when stopping; none while fenced, and the held ones go back. */
const nextHeld = <R>(state: State, context: FetcherContext<R>): Effect.Effect<Held | undefined> =>
  Effect.suspend(() => {
    if (state.stopping || state.held.length === 0) return Effect.succeed(undefined)
    return Effect.map(Clock.currentTimeMillis, (now) => {
      if (!context.fence.fenced(now)) return state.held.shift()
      giveBack(
        state.held.splice(0).map((h) => h.job),
        context.completer,
        fencedBeforeStart,
        now,
      )
      return undefined
    })
  })

/** Starting a slot, and what a slot does when its job ends. */
const slots = <R>(
  state: State,
  context: FetcherContext<R>,
  jobs: FiberSet.FiberSet<unknown, unknown>,
  poke: Effect.Effect<void>,
): Start<Exclude<R, Tracer.ParentSpan>> => {
  const start = (job: ClaimedJob, claimedAt: number) => {
    state.running++
    const slot = Effect.gen(function* () {
      let next: Held | undefined = { job, claimedAt }
      while (next !== undefined) {
        yield* context.executor.run(next.job, next.claimedAt)
        next = yield* nextHeld(state, context)
        if (next !== undefined && state.mayHaveMore && state.held.length <= state.lowWater && !state.claiming) {
          // Time to refill: every slot yields until the fetcher has sent its claim, which
          // otherwise waits behind the slots' next jobs until the held ones run out.
          if (!state.refilling) {
            state.refilling = true
            yield* poke
          }
          yield* Effect.yieldNow
        }
      }
    })
    return FiberSet.run(jobs, Effect.ensuring(slot, freed), { startImmediately: state.prefetch === 0 })
  }
  const freed: Effect.Effect<void, never, Exclude<R, Tracer.ParentSpan>> = Effect.suspend(() => {
    state.running--
    // Jobs held after this slot last looked (it may yield on its way out) take the slot.
    return Effect.flatMap(nextHeld(state, context), (next) => {
      const refill = state.mayHaveMore && state.held.length <= state.lowWater ? poke : Effect.void
      return next === undefined ? refill : Effect.andThen(start(next.job, next.claimedAt), refill)
    })
  })
  return start
}

/** Claims while there is room and claims come back full. */
const fetch = <R>(state: State, context: FetcherContext<R>, start: Start<Exclude<R, Tracer.ParentSpan>>) =>
  Effect.gen(function* () {
    for (;;) {
      const now = yield* Clock.currentTimeMillis
      const room = state.concurrency - state.running + state.prefetch - state.held.length
      if (room <= 0 || state.held.length > state.lowWater || context.outcomesStuck(now) || context.fence.fenced(now)) {
        state.refilling = false
        return
      }
      state.claiming = true
      const inHand = context.inHand.claiming()
      const claimed = yield* claim(state.queue, context.executor.kindNames, room, context.workerId, new Date(now)).pipe(
        Effect.tap((jobs) => Effect.sync(() => inHand.claimed(jobs.map((j) => j.id)))),
        Effect.onExit((exit) =>
          Effect.map(Clock.currentTimeMillis, (at) => inHand.settled(Exit.isSuccess(exit) ? undefined : at)),
        ),
        Effect.ensuring(
          Effect.sync(() => {
            state.claiming = false
            state.refilling = false
          }),
        ),
      )
      const claimedAt = yield* Clock.currentTimeMillis
      state.mayHaveMore = claimed.length === room
      if (context.fence.fenced(claimedAt)) {
        giveBack(claimed, context.completer, fencedBeforeStart, claimedAt)
        return
      }
      for (const job of claimed) {
        if (state.running < state.concurrency) yield* start(job, claimedAt)
        else state.held.push({ job, claimedAt })
      }
      if (!state.mayHaveMore) return
    }
  })

const release = (state: State, completer: JobCompleter) =>
  Effect.map(Clock.currentTimeMillis, (now) =>
    giveBack(
      state.held.splice(0).map((h) => h.job),
      completer,
      "the worker shut down before it started the job",
      now,
    ),
  )

/** Starts the fetch loop of `queue` in the current scope. */
export const make = <R>(queue: string, { concurrency, prefetch = 0 }: QueueOptions, context: FetcherContext<R>) =>
  Effect.gen(function* () {
    const notifications = yield* NotificationStream
    const jobs = yield* FiberSet.make()
    const wake = yield* Queue.sliding<void>(1)
    const poke = Queue.offer(wake, undefined).pipe(Effect.asVoid)
    const state: State = {
      queue,
      concurrency,
      prefetch,
      lowWater: Math.floor(prefetch / 2),
      held: [],
      running: 0,
      mayHaveMore: true,
      stopping: false,
      refilling: false,
      claiming: false,
    }
    const start = slots(state, context, jobs, poke)
    // A wake-up from outside says there may be new jobs, whatever the last claim found.
    const wakeUp = Effect.suspend(() => {
      state.mayHaveMore = true
      return poke
    })
    context.fence.onLive(wakeUp)
    yield* notifications.subscribe(Jobs.channel, (w) =>
      w._tag === "Connected" || w.payload === queue ? wakeUp : Effect.void,
    )
    const fetcher = yield* Queue.take(wake).pipe(
      Effect.andThen(fetch(state, context, start)),
      Effect.catchCause((cause) => Effect.logError(`jobs: fetching from queue ${queue} failed`, cause)),
      Effect.forever,
      Effect.forkScoped,
    )
    const poller = yield* wakeUp.pipe(Effect.delay(context.pollInterval), Effect.forever, Effect.forkScoped)
    yield* poke
    const stop = Effect.gen(function* () {
      state.stopping = true
      yield* Fiber.interrupt(fetcher)
      yield* Fiber.interrupt(poller)
      yield* release(state, context.completer)
    })
    const fetcherOf: JobFetcher = { jobs, stop, running: () => state.running }
    return fetcherOf
  })
