/**
 * `npm run bench -- handoff`: the consumer handoff (`Handoff.ts`: commit of an event to commit of
 * its job, a consumer running for real at a steady BENCH_HANDOFF_RATE events/s for
 * BENCH_HANDOFF_SECONDS) in both sequencing modes, in the same run, BENCH_REPEATS times each in
 * alternating order. In `post_commit` mode the latency includes the sequencer's hop: the producer's
 * commit, the sequencer's poll and batch, its NOTIFY, the round. The same settings as the handoff
 * part of `npm run bench -- consumer`, which measures the counter mode alone.
 *
 * A third arm, `post_commit_busy5`, is `post_commit` with the sequencer pausing 5 ms after a batch
 * that numbered appends, as it did before `busyInterval` (1 ms by default): the same-run baseline
 * of that change.
 */
import { Config, Console, Duration, Effect } from "effect"
import type { FanOutJob } from "../../src/consumer/ConsumerRound.ts"
import type * as Sequencer from "../../src/log/Sequencer.ts"
import { type LogSequencing, logSequencings } from "../../src/platform/BothyConfig.ts"
import type { Benchmark } from "../harness/Benchmark.ts"
import { BenchServer } from "../harness/BenchServer.ts"
import { round3 } from "../harness/Figures.ts"
import * as Handoff from "../harness/Handoff.ts"
import type { Report } from "../harness/Report.ts"
import { eventAt } from "../harness/SampleEvent.ts"
import * as Throughput from "../harness/Throughput.ts"

const settings = Config.all({
  throughput: Throughput.settings,
  rate: Config.Number("BENCH_HANDOFF_RATE").pipe(Config.withDefault(500)),
  seconds: Config.Number("BENCH_HANDOFF_SECONDS").pipe(Config.withDefault(20)),
})

// The fan-out of bench/consumer/consumer.ts: one job per event and receiver.
const fanOut = (seq: bigint, receivers: number): Array<FanOutJob> =>
  Array.from({ length: receivers }, (_, r) => ({
    seq,
    receiver: `r${r}`,
    kind: "bench.deliver",
    args: { seq: seq.toString(), receiver: `r${r}` },
  }))

/** The modes, and `post_commit` with the earlier 5 ms pause after a batch that numbered appends. */
const arms = [...logSequencings, "post_commit_busy5"] as const
type Arm = (typeof arms)[number]
const armConfig: Record<Arm, { readonly sequencing: LogSequencing; readonly sequencer?: Sequencer.SequencerOptions }> =
  {
    counter: { sequencing: "counter" },
    post_commit: { sequencing: "post_commit" },
    post_commit_busy5: { sequencing: "post_commit", sequencer: { busyInterval: "5 millis" } },
  }

const run = Effect.gen(function* () {
  const config = yield* settings
  const repeats = config.throughput.repeats
  const handoffConfig = {
    eventsPerSecond: config.rate,
    seconds: config.seconds,
    warmupSeconds: Duration.toSeconds(config.throughput.warmup),
    batchSize: 500,
    pollInterval: Duration.seconds(1),
    receivers: 1,
    producerConnections: 4,
    consumerConnections: 2,
    consumerSession: {},
    event: eventAt(0),
    fanOut,
  }
  const runs: Record<Arm, Array<Handoff.HandoffResult>> = { counter: [], post_commit: [], post_commit_busy5: [] }
  for (let repeat = 0; repeat < repeats; repeat++) {
    for (let i = 0; i < arms.length; i++) {
      const arm = arms[(i + repeat) % arms.length]!
      const result = yield* Handoff.measure({ ...handoffConfig, ...armConfig[arm] })
      runs[arm].push(result)
      yield* Console.log(
        `handoff ${arm} #${repeat + 1}: p50 ${result.latencyMs.p50} p95 ${result.latencyMs.p95} p99 ${result.latencyMs.p99} ms at ${result.achievedEventsPerSecond} events/s (machine ${Math.round(result.machineBusy * 100)}% busy)`,
      )
    }
  }
  const median = (arm: Arm, q: "p50" | "p95" | "p99") => round3(Throughput.median(runs[arm].map((r) => r.latencyMs[q])))
  const p95 = median("post_commit", "p95")
  return {
    conditions: {
      ...handoffConfig,
      event: "bench/harness/SampleEvent.ts eventAt(0); in post_commit mode with its tick added to the payload",
      fanOut: "one job per event",
      pollInterval: "1 second",
      repeats,
      order: "each repeat runs counter, post_commit and post_commit_busy5 in a rotating order",
      sequencer:
        "post_commit: Sequencer.layer() defaults (poll 5 ms idle, 1 ms after a batch that numbered appends, 1,000 appends per batch) on a pool of 2; post_commit_busy5: busyInterval 5 ms",
    },
    results: runs,
    baseline: "the counter mode, and post_commit with the 5 ms pause after a busy batch (post_commit_busy5), same run",
    targets: [{ name: "post_commit handoff latency p95 <= 10 ms", value: p95, target: 10, met: p95 <= 10 }],
    table: {
      columns: ["mode", "rate", "runs", "p50 ms", "p95 ms", "p99 ms", "p95 per run"],
      rows: arms.map((s) => [
        s,
        `${config.rate}/s`,
        String(runs[s].length),
        String(median(s, "p50")),
        String(median(s, "p95")),
        String(median(s, "p99")),
        runs[s].map((r) => r.latencyMs.p95).join(" / "),
      ]),
    },
  } satisfies Report
})

export default {
  description: "consumer handoff latency at a steady rate, counter and post_commit sequencing, same run",
  smoke: { BENCH_HANDOFF_RATE: "100", BENCH_HANDOFF_SECONDS: "1" },
  run: Effect.gen(function* () {
    const server = yield* BenchServer
    return yield* run.pipe(Effect.provide(server.pool(1)), Effect.scoped)
  }),
} satisfies Benchmark
