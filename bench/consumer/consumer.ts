/**
 * `npm run bench -- consumer`: what a consumer costs, in three parts, each next to a plain `pg`
 * baseline measured in the same run on the same server (see `ConsumerBaselines.ts`):
 *
 *   1. Round throughput (`RoundThroughput.ts`): a backlog of BENCH_BACKLOG events drained by
 *      rounds back to back, at batch sizes 100, 500 and 1000 and 1 or 10 receivers per event,
 *      against raw rounds doing the same reads and writes.
 *   2. Handoff latency (`HandoffLatency.ts`, on `harness/Handoff.ts`): commit of an event to
 *      commit of its job, with the consumer running for real at a steady BENCH_HANDOFF_RATE
 *      events/s for BENCH_HANDOFF_SECONDS.
 *   3. `Jobs.insert` of 1,000 rows per statement against the same rows through `unnest` on `pg`
 *      (`JobsInsert.ts`), with diagnostic steps that split the gap into its causes.
 *
 * Implementations take turns within each repeat, in a rotating order, so drift on a shared
 * machine falls on all of them alike.
 */
import { Config, Effect } from "effect"
import type { Benchmark } from "../harness/Benchmark.ts"
import { BenchServer, pgClientConfig } from "../harness/BenchServer.ts"
import * as Throughput from "../harness/Throughput.ts"
import * as ConsumerBaselines from "./ConsumerBaselines.ts"
import { report } from "./ConsumerReport.ts"
import { oursServices } from "./ConsumerSample.ts"
import { handoffConfigOf, handoffLatency } from "./HandoffLatency.ts"
import { jobsInsert } from "./JobsInsert.ts"
import { roundThroughput } from "./RoundThroughput.ts"

const settings = Config.all({
  throughput: Throughput.settings,
  backlog: Config.Int("BENCH_BACKLOG").pipe(Config.withDefault(20_000)),
  handoffRate: Config.Number("BENCH_HANDOFF_RATE").pipe(Config.withDefault(500)),
  handoffSeconds: Config.Number("BENCH_HANDOFF_SECONDS").pipe(Config.withDefault(20)),
  handoffWhatIf: Config.Boolean("BENCH_HANDOFF_WHATIF").pipe(Config.withDefault(true)),
})

const run = Effect.gen(function* () {
  const server = yield* BenchServer
  const config = yield* settings
  const ours = yield* oursServices
  const client = yield* ConsumerBaselines.connect(pgClientConfig(server))
  const repeats = config.throughput.repeats
  const roundCases = yield* roundThroughput({ ours, client, backlogEvents: config.backlog, repeats })
  const inserts = yield* jobsInsert({ ours, client, settings: config.throughput })
  const handoffConfig = handoffConfigOf({ ...config, warmup: config.throughput.warmup })
  const { handoff, asyncCommit } = yield* handoffLatency(handoffConfig, config.handoffWhatIf)
  return report({ config, handoffConfig, roundCases, jobsInsert: inserts, handoff, asyncCommit })
})

export default {
  description: "consumer rounds events/s vs raw pg rounds, handoff latency at a steady rate, Jobs.insert vs pg unnest",
  smoke: { BENCH_BACKLOG: "1000", BENCH_HANDOFF_RATE: "100", BENCH_HANDOFF_SECONDS: "1" },
  run: Effect.gen(function* () {
    const server = yield* BenchServer
    // Scoped here: the runner stops the server when its layer is released, before the scope it
    // hands benchmarks closes, and the pg client and pools must end first.
    return yield* run.pipe(Effect.provide(server.pool(1)), Effect.scoped)
  }),
} satisfies Benchmark
