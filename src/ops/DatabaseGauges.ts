/**
 * Gauges of what the database holds (`Status`), sampled every `interval` by each worker: every
 * consumer's lag and pending age (also those no process of this one runs, so that a consumer no
 * worker serves shows as falling behind instead of going absent), jobs by state and kind, the
 * oldest running attempt per kind, subscriptions by state and cause and those degraded, the oldest pending delivery,
 * push registrations and the partition runway.
 *
 * A group that leaves the result (the last running job of a kind finished) is set to 0 rather
 * than left at its last value: a gauge that stops changing would lie. Groups that are not in the
 * result yet are 0 from the first sample, for every value of their bounded labels: jobs by every
 * state for each kind the database holds or this process's `JobWorker` runs, subscriptions by
 * every state and cause.
 */
import { Clock, Duration, Effect, Layer, Metric, Option } from "effect"
import * as ConsumerMetrics from "../consumer/ConsumerMetrics.ts"
import { jobStates } from "../jobs/JobControl.ts"
import { JobWorker } from "../jobs/JobWorker.ts"
import * as WebhookMetrics from "../webhooks/WebhookMetrics.ts"
import * as OpsMetrics from "./OpsMetrics.ts"
import * as Status from "./Status.ts"

/** Every gauge a set of label values was written to, so that values missing next time become 0. */
const seen = () => {
  const written = new Map<string, { metric: Metric.Metric<number, unknown>; fresh: boolean }>()
  return {
    set: (metric: Metric.Metric<number, unknown>, attributes: Record<string, string>, value: number) => {
      const tagged = Metric.withAttributes(metric, attributes)
      written.set(`${tagged.id}${JSON.stringify(attributes)}`, { metric: tagged, fresh: true })
      return Metric.update(tagged, value)
    },
    /** Sets to 0 what the last sample did not write, and starts the next sample. */
    settle: Effect.suspend(() =>
      Effect.forEach(
        [...written.values()],
        (entry) => {
          const stale = !entry.fresh
          entry.fresh = false
          return stale ? Metric.update(entry.metric, 0) : Effect.void
        },
        { discard: true },
      ),
    ),
  }
}

/** Every (state, cause) a subscription can be in: active ones have cause `none`. */
const subscriptionGroups = [
  { state: "active", cause: "none" },
  ...WebhookMetrics.disabledCauses.map((cause) => ({ state: "disabled", cause })),
]

const sampler = (knownKinds: ReadonlyArray<string>) => {
  const gauges = seen()
  return Effect.gen(function* () {
    const status = yield* Status.read()
    for (const c of status.consumers) {
      yield* gauges.set(ConsumerMetrics.lag, { consumer: c.name }, c.lag)
      yield* gauges.set(ConsumerMetrics.pendingAge, { consumer: c.name }, c.pendingAgeSeconds)
    }
    for (const kind of new Set([...knownKinds, ...status.jobs.map((j) => j.kind)])) {
      yield* gauges.set(OpsMetrics.oldestRunning, { kind }, 0)
      for (const state of jobStates) yield* gauges.set(OpsMetrics.jobs, { state, kind }, 0)
    }
    for (const j of status.jobs) {
      yield* gauges.set(OpsMetrics.jobs, { state: j.state, kind: j.kind }, j.count)
      if (j.state === "running") yield* gauges.set(OpsMetrics.oldestRunning, { kind: j.kind }, j.oldestSeconds)
    }
    for (const group of subscriptionGroups) yield* gauges.set(OpsMetrics.subscriptions, group, 0)
    for (const s of status.subscriptions) {
      yield* gauges.set(OpsMetrics.subscriptions, { state: s.state, cause: s.cause ?? "none" }, s.count)
    }
    yield* gauges.set(
      WebhookMetrics.degraded,
      {},
      status.subscriptions.reduce((n, s) => n + s.degraded, 0),
    )
    yield* gauges.set(OpsMetrics.oldestPendingDelivery, {}, status.oldestPendingDelivery?.ageSeconds ?? 0)
    if (status.pushRegistrations !== null) yield* gauges.set(OpsMetrics.pushRegistrations, {}, status.pushRegistrations)
    yield* gauges.set(OpsMetrics.partitionRunway, {}, status.partitions.runwaySeconds)
    yield* gauges.settle
    yield* Metric.update(OpsMetrics.sampledAt, (yield* Clock.currentTimeMillis) / 1000)
  })
}

export interface DatabaseGaugesOptions {
  /** Default 15 seconds, Prometheus's usual scrape interval. */
  readonly interval?: Duration.Input
}

/** Samples once before the layer is up (so a first scrape finds every series), then every `interval`. */
export const layer = (options: DatabaseGaugesOptions = {}) =>
  Layer.effectDiscard(
    Effect.gen(function* () {
      const worker = yield* Effect.serviceOption(JobWorker)
      const kinds = Option.match(worker, { onNone: () => [], onSome: (w) => w.kinds })
      const sample = sampler(kinds).pipe(
        Effect.catchCause((cause) => Effect.logWarning("ops: reading the database gauges failed", cause)),
      )
      yield* sample
      yield* sample.pipe(Effect.delay(options.interval ?? Duration.seconds(15)), Effect.forever, Effect.forkScoped)
    }),
  )
