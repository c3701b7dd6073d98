/**
 * Consumer lag and the oldest pending delivery's age, sampled by the worker that serves the
 * console: the database keeps no history of either (a cursor and the pending rows are only "now"),
 * so the overview's `lag` chart draws what this ring kept.
 *
 * What it keeps true: one sample every `interval` (10 s), the newest `capacity` (360: an hour)
 * kept, each costing two cheap reads (`Status.consumers`, `WebhookStatus.oldestPending`). A sample
 * that cannot be read is skipped, not drawn as 0. The ring lives in memory: a restart empties it,
 * and each worker keeps its own.
 */
import { Clock, Context, Duration, Effect, Layer } from "effect"
import { SqlClient } from "effect/sql"
import * as Status from "../ops/Status.ts"
import * as WebhookStatus from "../webhooks/WebhookStatus.ts"

export interface LagSample {
  /** When it was taken, Unix seconds. */
  readonly at: number
  /** Each consumer's lag in events, by name. */
  readonly lags: Readonly<Record<string, number>>
  /** Seconds since the event of the oldest pending delivery was committed; 0: none pending. */
  readonly oldestPendingSeconds: number
}

export interface SamplerOptions {
  readonly interval: Duration.Input
  readonly capacity: number
}

export const defaults: SamplerOptions = { interval: Duration.seconds(10), capacity: 360 }

export class LagSamples extends Context.Service<
  LagSamples,
  {
    /** The samples kept, oldest first. */
    readonly samples: Effect.Effect<ReadonlyArray<LagSample>>
  }
>()("bothy/console/LagSamples") {}

const sampleOnce = (sql: SqlClient.SqlClient) =>
  Effect.gen(function* () {
    const consumers = yield* Status.consumers(sql)
    const [oldest] = yield* WebhookStatus.oldestPending(sql)
    return {
      at: Math.floor((yield* Clock.currentTimeMillis) / 1000),
      lags: Object.fromEntries(consumers.map((c) => [c.name, c.lag])),
      oldestPendingSeconds: oldest?.ageSeconds ?? 0,
    } satisfies LagSample
  })

/** The ring and the fiber that fills it, for the scope of the layer. */
export const layerWith = (options: SamplerOptions) =>
  Layer.effect(
    LagSamples,
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const ring: Array<LagSample> = []
      const take = sampleOnce(sql).pipe(
        Effect.tap((sample) =>
          Effect.sync(() => {
            ring.push(sample)
            if (ring.length > options.capacity) ring.splice(0, ring.length - options.capacity)
          }),
        ),
        Effect.catch((e) => Effect.logDebug("console: a lag sample could not be read", e)),
      )
      yield* Effect.forever(Effect.andThen(take, Effect.sleep(options.interval))).pipe(Effect.forkScoped)
      return LagSamples.of({ samples: Effect.sync(() => ring.slice()) })
    }),
  )

export const layer = layerWith(defaults)
