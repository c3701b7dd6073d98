/**
 * Part 2 of `consumer`: commit of an event to commit of its job (`Handoff.measure`), the consumer
 * running for real at a steady rate, and, as a diagnostic that is never the target figure, the
 * same run with the consumer's own transactions committed asynchronously (producers stay
 * durable), which prices the WAL flush a round waits for.
 */
import { Console, Duration, Effect } from "effect"
import * as Handoff from "../harness/Handoff.ts"
import { eventAt } from "../harness/SampleEvent.ts"

export const handoffConfigOf = (config: {
  readonly handoffRate: number
  readonly handoffSeconds: number
  readonly warmup: Duration.Duration
}) => ({
  eventsPerSecond: config.handoffRate,
  seconds: config.handoffSeconds,
  warmupSeconds: Duration.toSeconds(config.warmup),
  batchSize: 500,
  pollInterval: Duration.seconds(1),
  receivers: 1,
  producerConnections: 4,
  consumerConnections: 2,
})

/** The figures of a handoff run worth printing as it ends; the file gets everything. */
const summary = (h: Handoff.HandoffResult) => ({
  events: h.events,
  achievedEventsPerSecond: h.achievedEventsPerSecond,
  latencyMs: h.latencyMs,
  breakdownMs: h.breakdownMs,
  appendMs: h.producer.appendMs,
  clientCores: h.clientCores,
  machineBusy: h.machineBusy,
  fdatasyncMsAfter: h.fdatasyncMsAfter,
  roundPhasesMsP50: Object.fromEntries(Object.entries(h.rounds.phasesMs).map(([k, d]) => [k, d.p50])),
  eventsPerRound: h.rounds.eventsPerRound,
})

export const handoffLatency = (handoffConfig: ReturnType<typeof handoffConfigOf>, whatIf: boolean) =>
  Effect.gen(function* () {
    yield* Console.log(
      `handoff: ${handoffConfig.eventsPerSecond} events/s for ${handoffConfig.seconds} s (after ${handoffConfig.warmupSeconds} s warm-up)`,
    )
    const handoffWith = (consumerSession: Readonly<Record<string, string>>) =>
      Handoff.measure({ ...handoffConfig, consumerSession, event: eventAt(0), fanOut: Handoff.jobPerReceiver })
    const handoff = yield* handoffWith({})
    yield* Console.log(`handoff: ${JSON.stringify(summary(handoff), null, 2)}`)
    const asyncCommit = whatIf ? yield* handoffWith({ synchronous_commit: "off" }) : undefined
    if (asyncCommit !== undefined) {
      yield* Console.log(
        `handoff what-if (consumer synchronous_commit=off): ${JSON.stringify(summary(asyncCommit), null, 2)}`,
      )
    }
    return { handoff, asyncCommit }
  })
