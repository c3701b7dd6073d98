/**
 * The demo `bothy start` runs beside the worker on the embedded database: it prepares the demo's
 * subscriptions and browsers (`DemoSetup`), says whether it found data of an earlier start, then
 * runs the producer (`DemoProducer`) and the progress line (`DemoProgress`) until its scope
 * closes. The receiver and the push service are the caller's, so they can outlive the worker's
 * last deliveries.
 */
import { Effect, Layer, Option } from "effect"
import { EventLog } from "../log/EventLog.ts"
import type { LogSequencing } from "../platform/BothyConfig.ts"
import { PushConfig, type PushSettings } from "../push/PushConfig.ts"
import { WebhookSubscriptions } from "../webhooks/subscriptions/WebhookSubscriptions.ts"
import { WebhookConfig, type WebhookSettings } from "../webhooks/WebhookConfig.ts"
import type { DemoCounts } from "./DemoCounts.ts"
import type { DemoNativeServices } from "./DemoNativeServices.ts"
import * as DemoProducer from "./DemoProducer.ts"
import * as DemoProgress from "./DemoProgress.ts"
import type { DemoPushService } from "./DemoPushService.ts"
import type { DemoReceiver } from "./DemoReceiver.ts"
import * as DemoSetup from "./DemoSetup.ts"

export interface DemoOptions {
  readonly home: string
  /** Events appended per second. */
  readonly rate: number
  readonly counts: DemoCounts
  readonly receiver: DemoReceiver
  /** The push service and the worker's push settings; `None`: push is off. */
  readonly push: Option.Option<{
    readonly service: DemoPushService
    readonly native: DemoNativeServices
    readonly settings: PushSettings
  }>
  readonly webhooks: WebhookSettings
  readonly sequencing: LogSequencing
  /** Standard output is a terminal: the progress line is rewritten in place. */
  readonly terminal: boolean
}

const announce = (options: DemoOptions, prepared: DemoSetup.Prepared) =>
  Effect.gen(function* () {
    yield* Effect.logInfo(
      prepared.reused
        ? `reusing the data kept in ${options.home} from an earlier start: ${prepared.head} events in the log, ${prepared.reusedSubscriptions} of the demo's subscriptions kept; its ${prepared.registrations} browsers registered anew`
        : `a new bothy in ${options.home}: the demo's ${prepared.subscriptions} subscriptions and ${prepared.registrations} browsers made`,
    )
    const push = Option.match(options.push, {
      onNone: () => "push is off",
      onSome: ({ service, native }) =>
        `pushes to ${service.origin} (each decrypted), to APNs and FCM stand-ins on ${native.origin}`,
    })
    yield* Effect.logInfo(
      `demo: ${options.rate} events/s into ${DemoSetup.spaces.join(", ")}; webhooks to ${options.receiver.url("")}… (each signature verified with standardwebhooks); ${push}; Ctrl-C prints a summary and stops everything`,
    )
  })

export const layer = (options: DemoOptions) =>
  Layer.effectDiscard(
    Effect.gen(function* () {
      const push = Option.getOrUndefined(options.push)
      const prepared = yield* DemoSetup.prepare(options.home, options.receiver, push)
      yield* announce(options, prepared)
      yield* DemoProducer.run(options.rate, options.counts).pipe(Effect.forkScoped)
      yield* DemoProgress.run(options.counts, options.terminal).pipe(Effect.forkScoped)
    }),
  ).pipe(
    Layer.provide(
      Layer.mergeAll(
        WebhookSubscriptions.layer.pipe(Layer.provide(WebhookConfig.layerWith(options.webhooks))),
        Option.match(options.push, { onNone: () => Layer.empty, onSome: (p) => PushConfig.layerWith(p.settings) }),
      ).pipe(Layer.provideMerge(EventLog.layerFor(options.sequencing))),
    ),
  )
