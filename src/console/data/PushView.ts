/**
 * What the push page reads: registrations by kind and the ones refreshed last (the database's,
 * `PushRegistrationKinds`), and what this worker's sends came to by kind, from the push counters
 * (`PushMetrics`): the database keeps no per-message outcome (a batch job settles many messages at
 * once), so the counts are this process's since it started, the same series Prometheus scrapes.
 */
import { Effect, Metric, Option } from "effect"
import { SqlClient } from "effect/sql"
import { PushConfig } from "../../push/PushConfig.ts"
import * as PushMetrics from "../../push/PushMetrics.ts"
import * as PushRegistrationKinds from "../../push/PushRegistrationKinds.ts"

/** Registrations listed, refreshed last first. */
export const recentLimit = 25

type Outcome = (typeof PushMetrics.deliveryOutcomes)[number]

/** The outcomes counted as a failed message or attempt (gone is its own column). */
export const failures: ReadonlyArray<Outcome> = [
  "payload_too_large",
  "config_error",
  "rejected",
  "blocked",
  "retried",
  "throttled",
]
/** What ends before a request, counted for every kind together. */
export const beforeRequest: ReadonlyArray<Outcome> = ["unregistered", "denied", "expired"]

export interface OutcomeRow {
  readonly kind: string
  readonly sent: number
  readonly failed: number
  readonly gone: number
  /** Each outcome with a count, for the detail. */
  readonly counts: ReadonlyArray<readonly [Outcome, number]>
}

/** Each outcome's count of `metric` with `attributes` (and the outcome). */
const counted = (metric: Metric.Counter<number>, attributes: Record<string, string> = {}) =>
  Effect.forEach(PushMetrics.deliveryOutcomes, (outcome) =>
    Effect.map(
      Metric.value(Metric.withAttributes(metric, { ...attributes, outcome })),
      (s) => [outcome, s.count] as const,
    ),
  )

const row = (kind: string, counts: ReadonlyArray<readonly [Outcome, number]>): OutcomeRow => {
  const of = (outcomes: ReadonlyArray<Outcome>) =>
    counts.filter(([o]) => outcomes.includes(o)).reduce((n, [, c]) => n + c, 0)
  return {
    kind,
    sent: of(["delivered"]),
    failed: of(failures),
    gone: of(["gone"]),
    counts: counts.filter(([, c]) => c > 0),
  }
}

export const read = Effect.fn("PushView.read")(function* () {
  const sql = yield* SqlClient.SqlClient
  const configured = Option.isSome(yield* Effect.serviceOption(PushConfig))
  const kinds = yield* PushRegistrationKinds.byKind(sql)
  const recent = yield* PushRegistrationKinds.recent(sql, recentLimit)
  const web = yield* counted(PushMetrics.deliveries)
  const native = yield* Effect.forEach(PushMetrics.providers, (provider) =>
    Effect.map(counted(PushMetrics.nativeDeliveries, { provider }), (counts) => row(provider, counts)),
  )
  const webRow = row(
    "webpush",
    web.filter(([o]) => !beforeRequest.includes(o)),
  )
  const before = web.filter(([o]) => beforeRequest.includes(o))
  return { configured, kinds, recent, outcomes: [webRow, ...native], beforeRequest: before }
})
