/**
 * The overview's figures over the last hour, one bucket per minute (the current minute last, so
 * far): events numbered, deliveries by outcome, delivery latency, push jobs finished; and the lag
 * samples the worker kept (`LagSampler`). Each figure is read by the part that owns its table
 * (`EventLogActivity`, `WebhookActivity`, `JobActivity`) through an index or the hour leaves, with
 * the window's start as a parameter taken from `Clock`.
 */
import { Clock, Effect, Option } from "effect"
import { SqlClient } from "effect/sql"
import * as JobActivity from "../../jobs/JobActivity.ts"
import * as EventLogActivity from "../../log/EventLogActivity.ts"
import * as Status from "../../ops/Status.ts"
import { PushConfig } from "../../push/PushConfig.ts"
import * as PushJob from "../../push/PushJob.ts"
import * as WebhookActivity from "../../webhooks/WebhookActivity.ts"
import type { ChartSpec } from "../ChartFigure.ts"
import { LagSamples } from "../LagSampler.ts"

/** Pending deliveries are counted up to this many. */
export const pendingCap = 10_000

const minutes = 60

/** The minutes' starts (Unix seconds), oldest first, ending with the current minute. */
const minuteStarts = (nowMillis: number) => {
  const current = Math.floor(nowMillis / 60_000) * 60
  return Array.from({ length: minutes }, (_, i) => current - (minutes - 1 - i) * 60)
}

/** One row per minute of `xs`, taken from `rows` by their `minute`, `fill` where there is none. */
const column = <R extends { readonly minute: number }>(
  xs: ReadonlyArray<number>,
  rows: ReadonlyArray<R>,
  pick: (row: R) => number | null,
  fill: number | null = 0,
) => {
  const byMinute = new Map(rows.map((r) => [r.minute, r]))
  return xs.map((x) => {
    const row = byMinute.get(x)
    return row === undefined ? fill : pick(row)
  })
}

const sum = (values: ReadonlyArray<number | null>) => values.reduce<number>((a, v) => a + (v ?? 0), 0)

export const read = Effect.fn("OverviewFigures.read")(function* () {
  const sql = yield* SqlClient.SqlClient
  const xs = minuteStarts(yield* Clock.currentTimeMillis)
  const since = new Date(xs[0]! * 1000)
  const events = yield* EventLogActivity.perMinute(sql, since)
  const finished = yield* WebhookActivity.finishedPerMinute(sql, since)
  const failed = yield* WebhookActivity.failedAttemptsPerMinute(sql, since)
  const [pending] = yield* WebhookActivity.pendingUpTo(sql, pendingCap)
  const consumers = yield* Status.consumers(sql)
  const samples = (yield* (yield* LagSamples).samples).filter((s) => s.at > xs[0]!)
  const push = yield* Effect.serviceOption(PushConfig)
  const pushJobs = Option.isSome(push)
    ? yield* JobActivity.finishedPerMinute(sql, [PushJob.deliverKind, PushJob.legacyDeliverKind], since)
    : null

  const perMinute = column(xs, events, (r) => r.count)
  const delivered = column(xs, finished, (r) => r.delivered)
  const dead = column(xs, finished, (r) => r.dead)
  const failedAttempts = column(xs, failed, (r) => r.failed)
  const names = consumers.map((c) => c.name)
  const charts = {
    events: { series: ["events/s"], unit: "events/s", data: [xs, perMinute.map((n) => (n ?? 0) / 60)] },
    deliveries: {
      series: ["delivered", "failed attempts", "dead"],
      unit: "per minute",
      data: [xs, delivered, failedAttempts, dead],
    },
    latency: {
      series: ["p50", "p95"],
      unit: "ms",
      points: true,
      data: [xs, column(xs, finished, (r) => r.p50, null), column(xs, finished, (r) => r.p95, null)],
    },
    lag: {
      series: [...names.map((n) => `${n} lag (events)`), "oldest pending (s)"],
      unit: "events · s",
      points: true,
      // Led by the hour's start with no values, so a young ring is drawn on the same hour as the rest.
      data: [
        [xs[0]!, ...samples.map((s) => s.at)],
        ...names.map((n) => [null, ...samples.map((s) => s.lags[n] ?? null)]),
        [null, ...samples.map((s) => s.oldestPendingSeconds)],
      ],
    },
    push:
      pushJobs === null
        ? null
        : {
            series: ["completed", "discarded", "cancelled"],
            unit: "jobs per minute",
            data: [
              xs,
              ...(["completed", "discarded", "cancelled"] as const).map((state) =>
                column(
                  xs,
                  pushJobs.filter((r) => r.state === state),
                  (r) => r.count,
                ),
              ),
            ],
          },
  } satisfies Record<string, ChartSpec | null>
  return {
    charts,
    facts: {
      events: sum(perMinute),
      delivered: sum(delivered),
      failedAttempts: sum(failedAttempts),
      dead: sum(dead),
      pending: pending?.pending ?? 0,
      consumers: consumers.map((c) => ({ name: c.name, lag: c.lag, pendingAgeSeconds: c.pendingAgeSeconds })),
      samples: samples.length,
    },
  }
})

export type Overview = Effect.Success<ReturnType<typeof read>>
