/**
 * A world for push delivery tests: a loopback push service, browsers registered with it, members
 * with the right to receive, and a job worker running `push.deliver` whose every recorded outcome
 * lands on a queue the test waits on.
 */
import { Context, Effect, Layer, Queue } from "effect"
import * as PermissionGrants from "../../src/authz/PermissionGrants.ts"
import { pushDeliver } from "../../src/authz/Permissions.ts"
import type { Reported } from "../../src/jobs/JobCompleter.ts"
import * as JobWorker from "../../src/jobs/JobWorker.ts"
import * as PushAudience from "../../src/push/PushAudience.ts"
import { PushConfig, type PushSettings } from "../../src/push/PushConfig.ts"
import * as PushDelivery from "../../src/push/PushDelivery.ts"
import * as PushFanOut from "../../src/push/PushFanOut.ts"
import * as PushRegistrations from "../../src/push/PushRegistrations.ts"
import * as PushService from "../../testkit/PushService.ts"

/** A member of `space` allowed `push.deliver` there, with one browser per name in `browsers`. */
export const member = (service: PushService.PushService, space: string, principal: string, browsers = 1) =>
  Effect.gen(function* () {
    yield* PushAudience.join(space, principal)
    yield* PermissionGrants.grant(principal, pushDeliver, space)
    return yield* Effect.forEach(Array.from({ length: browsers }), (_, i) =>
      Effect.gen(function* () {
        const browser = PushService.browserSubscription(service, `${principal}${i}`)
        const { id } = yield* PushRegistrations.register(principal, browser.json)
        return { registration: id, browser }
      }),
    )
  })

/**
 * Starts the `push.deliver` worker in the current scope, its push settings the layer's with
 * `overrides` (the native providers' fakes, started by the test); each recorded batch of outcomes
 * arrives on `finalized`.
 */
export const startWorkerWith = (overrides: Partial<PushSettings>) =>
  Effect.gen(function* () {
    const finalized = yield* Queue.unbounded<Reported>()
    const settings = { ...(yield* PushConfig), ...overrides }
    const kinds = yield* Effect.provideService(PushDelivery.make, PushConfig, settings)
    const context = yield* Layer.build(
      JobWorker.layer({
        kinds: [...kinds],
        queues: { [PushFanOut.queue]: { concurrency: 8 } },
        onFinalized: (batch) => Queue.offerAll(finalized, batch).pipe(Effect.asVoid),
      }),
    )
    return { finalized, worker: Context.get(context, JobWorker.JobWorker) }
  })

/** Starts the `push.deliver` worker in the current scope; each recorded batch of outcomes arrives on `finalized`. */
export const startWorker = startWorkerWith({})

/** Waits for `n` recorded outcomes. */
export const outcomes = (finalized: Queue.Dequeue<Reported>, n: number) =>
  Effect.forEach(Array.from({ length: n }), () => Queue.take(finalized))
