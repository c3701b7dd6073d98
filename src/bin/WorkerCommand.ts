/**
 * What `bothy worker` does, for every command that runs the worker (`worker`, and `start`, which
 * adds the demo): its settings, read and checked before anything starts, so a bad value never
 * leaves a server behind; then the worker's layers with `/metrics`, the admin server and tracing, until a signal
 * interrupts it or the embedded server exits under it.
 */
import { Effect, Layer, Option } from "effect"
import * as AdminAuth from "../admin/AdminAuth.ts"
import * as AdminServer from "../admin/AdminServer.ts"
import * as MetricsEndpoint from "../ops/MetricsEndpoint.ts"
import * as Observability from "../ops/Observability.ts"
import * as Tracing from "../ops/Tracing.ts"
import * as BothyConfig from "../platform/BothyConfig.ts"
import * as Database from "../platform/Database.ts"
import * as PushConfig from "../push/PushConfig.ts"
import * as WebhookConfig from "../webhooks/WebhookConfig.ts"
import * as AdminCommands from "./AdminCommands.ts"
import * as Worker from "./Worker.ts"

/** Every setting the worker needs, validated. */
export const load = Effect.gen(function* () {
  const settings = yield* BothyConfig.load
  yield* WebhookConfig.checkRetention(settings.sync.eventRetention)
  const webhooks = yield* AdminCommands.loadWebhookSettings
  const push = yield* PushConfig.load(webhooks.policy)
  const metrics = yield* MetricsEndpoint.loadAddress
  const admin: Worker.AdminSettings = {
    address: yield* AdminServer.loadAddress,
    token: yield* AdminAuth.loadToken,
    maxBodyBytes: yield* AdminServer.loadMaxBodyBytes,
  }
  const tracing = yield* Tracing.load
  return { settings, webhooks, push, metrics, admin, tracing }
})

export type Loaded = Effect.Success<typeof load>

/** The worker's layers as `bothy worker` runs them, `/metrics` and tracing included. */
export const layer = ({ settings, webhooks, push, metrics, admin, tracing }: Loaded) =>
  Observability.layer(metrics).pipe(
    Layer.provideMerge(Worker.layer(settings, webhooks, push, admin)),
    // Below everything, so that the spans of the worker's shutdown are exported too.
    Layer.provide(Tracing.layer(tracing)),
  )

/**
 * Runs the worker until a signal interrupts it, or fails when the embedded server exits under it.
 * `alongside` is built on top of the worker (so it starts after it, and stops before it).
 */
export const run = <E = never, R = never>(loaded: Loaded, alongside: Layer.Layer<never, E, R> = Layer.empty) =>
  Effect.gen(function* () {
    if (Option.isNone(loaded.push)) {
      yield* Effect.logInfo(
        `push is off: no VAPID keys (${BothyConfig.envName(PushConfig.keys.publicKey)}, ${BothyConfig.envName(PushConfig.keys.privateKey)}, ${BothyConfig.envName(PushConfig.keys.subject)}; bothy push keys makes a pair)`,
      )
    }
    const consumers = Option.isSome(loaded.push) ? "webhooks, push" : "webhooks"
    yield* Effect.logInfo(
      `bothy worker running (consumers: ${consumers}; job queues: ${consumers}); SIGTERM or Ctrl-C stops it`,
    )
    return yield* (yield* Database.DatabaseServer).exited.pipe(
      Effect.onInterrupt(() => Effect.logInfo("bothy worker stopping: running jobs finish or are put back")),
    )
  }).pipe(Effect.provide(Layer.provideMerge(alongside, layer(loaded))))
