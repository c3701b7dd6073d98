/**
 * What the demo tells the person watching: on a terminal, one line rewritten every second
 * (events appended, deliveries done, pushes, APNs and FCM pushes, each consumer's lag, the push handoff p95); otherwise
 * the same as a log line every few seconds. Log lines that arrive meanwhile clear the progress
 * line first (`terminalLogger`), so the two never run into each other. When it stops, the summary.
 */
import { Clock, type Duration, Effect, Logger, Metric, Schedule } from "effect"
import * as Status from "../ops/Status.ts"
import { age } from "../ops/StatusReport.ts"
import * as PushMetrics from "../push/PushMetrics.ts"
import type { DemoCounts } from "./DemoCounts.ts"

const clearLine = "\r\x1b[2K"

/**
 * The smallest bucket bound under which 95 % of the observations since `before` fall, in ms;
 * `undefined` with none. Over a window, so a slow first second does not weigh on the line for good.
 */
export const p95Millis = (now: Metric.HistogramState, before: Metric.HistogramState | undefined) => {
  const count = now.count - (before?.count ?? 0)
  if (count <= 0) return undefined
  const earlier = new Map(before?.buckets ?? [])
  const bound = now.buckets.find(([le, cumulative]) => cumulative - (earlier.get(le) ?? 0) >= count * 0.95)?.[0]
  return (bound === undefined || !Number.isFinite(bound) ? now.max : bound) * 1000
}

const millis = (ms: number | undefined) =>
  ms === undefined ? "-" : ms < 10 ? `${ms.toFixed(1)} ms` : `${Math.round(ms)} ms`

/**
 * One line of progress, read now; the handoff p95 is over the time since the line before
 * (`window` keeps the histogram between lines).
 */
export const line = (counts: DemoCounts, window: { before?: Metric.HistogramState }) =>
  Effect.gen(function* () {
    const consumers = yield* Status.read().pipe(
      Effect.map((s) => s.consumers.map((c) => `${c.name} ${c.lag}`).join(", ")),
      Effect.orElseSucceed(() => "unknown"),
    )
    const histogram = yield* Metric.value(PushMetrics.handoffLatency)
    const handoff = p95Millis(histogram, window.before)
    window.before = histogram
    const failures = counts.webhookFailures + counts.pushFailures + counts.appendFailures
    return [
      `events appended ${counts.appended}`,
      `deliveries done ${counts.verified}`,
      `pushes ${counts.pushes}`,
      `apns ${counts.apnsPushes}`,
      `fcm ${counts.fcmPushes}`,
      `consumer lag ${consumers}`,
      `handoff p95 ${millis(handoff)}`,
      ...(failures > 0 ? [`failures ${failures}`] : []),
    ].join(" | ")
  })

/** A logger for a terminal that clears the progress line before each log line. */
export const terminalLogger = Logger.make((options) => {
  process.stdout.write(clearLine)
  Logger.defaultLogger.log(options)
})

/** Runs until interrupted: the rewritten line on a terminal, a log line every `every` otherwise. */
export const run = (counts: DemoCounts, terminal: boolean, every: Duration.Input = "5 seconds") => {
  const window = {}
  return terminal
    ? line(counts, window).pipe(
        Effect.flatMap((text) => Effect.sync(() => process.stdout.write(`${clearLine}${text}`))),
        Effect.repeat(Schedule.spaced("1 second")),
        Effect.ensuring(Effect.sync(() => process.stdout.write(`${clearLine}`))),
      )
    : line(counts, window).pipe(
        Effect.flatMap((text) => Effect.logInfo(`demo: ${text}`)),
        Effect.repeat(Schedule.spaced(every)),
      )
}

/** The lines printed when the demo stops. */
export const summary = (counts: DemoCounts, ranMillis: number) => {
  const failures = counts.webhookFailures + counts.pushFailures + counts.appendFailures
  return [
    `bothy start: stopped after ${age(ranMillis / 1000)}`,
    `  events appended      ${counts.appended}`,
    `  deliveries           ${counts.verified} webhooks (signatures verified ${counts.verified})`,
    `  pushes               ${counts.pushes} (decrypted)`,
    `  apns pushes          ${counts.apnsPushes} (provider token verified)`,
    `  fcm pushes           ${counts.fcmPushes} (access token verified)`,
    `  failures             ${failures} (webhooks refused ${counts.webhookFailures}, pushes refused ${counts.pushFailures}, appends failed ${counts.appendFailures})`,
  ].join("\n")
}

/** When the demo began, for the summary. */
export const startedAt = Clock.currentTimeMillis
