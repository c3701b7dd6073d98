/**
 * `npm run bench -- append`: appended events/s through `EventLog.append` with 1, 8, 16 and 32
 * concurrent producers, one and then ten events per transaction, in both sequencing modes
 * (`ours`: the counter; `post_commit` in its two placements, `postCommit`: `EventLog.layerPostCommit`,
 * and `inPlace`: `EventLog.layerPostCommitInPlace`, each with a `Sequencer` running in this process
 * on two connections of its own), next to the two `pg` driver baselines of
 * `AppendBaselines.ts` measured in the same run on the same server. A post_commit run also
 * measures commit-to-readable latency (`CommitToReadable`) and, after its window, how long the
 * sequencer took to number what was still pending.
 *
 * Every run starts from the same state (empty log, counter at 0, fresh checkpoint), and the three
 * implementations take turns within each repeat, in a rotating order, so drift on a shared
 * machine falls on all of them alike. After each run of ours (and of the naive baseline, which is
 * gapless too) the log is checked: seqs are exactly 1..N and N is every event acknowledged.
 */
import { Console, Effect } from "effect"
import type { NewEvent } from "../../src/log/Event.ts"
import type { Benchmark } from "../harness/Benchmark.ts"
import { BenchServer, pgClientConfig } from "../harness/BenchServer.ts"
import { round0 } from "../harness/Figures.ts"
import * as Rotation from "../harness/Rotation.ts"
import * as Throughput from "../harness/Throughput.ts"
import * as AppendBaselines from "./AppendBaselines.ts"
import {
  batchSizes,
  type Case,
  type Implementation,
  implementations,
  producerCounts,
  type RunResult,
} from "./AppendCase.ts"
import { report } from "./AppendReport.ts"
import { asRow, batchesOf, reset } from "./AppendSample.ts"
import { counter } from "./Counter.ts"
import { verifyCount, verifyGapless } from "./LogChecks.ts"
import { postCommit, type Readable } from "./PostCommit.ts"
import * as WakeLatency from "./WakeLatency.ts"

const once = (
  server: BenchServer["Service"],
  settings: Throughput.Settings,
  implementation: Implementation,
  producers: number,
  batches: ReadonlyArray<ReadonlyArray<NewEvent>>,
) =>
  Effect.gen(function* () {
    yield* reset
    const result: Throughput.Run & Partial<Readable> =
      implementation === "ours"
        ? yield* counter(server, settings, producers, batches)
        : implementation === "postCommit" || implementation === "inPlace"
          ? yield* postCommit(
              server,
              settings,
              producers,
              batches,
              implementation === "inPlace" ? "in_place" : "pending",
            )
          : yield* AppendBaselines.measure(
              implementation,
              pgClientConfig(server),
              settings,
              producers,
              batches.map((b) => b.map(asRow)),
            )
    const verified =
      implementation === "plain"
        ? yield* verifyCount(implementation, result.committed)
        : yield* verifyGapless(implementation, result.committed)
    return { ...result, verified }
  })

const readableOf = (runs: ReadonlyArray<RunResult>) => ({
  p50: Throughput.median(runs.map((r) => r.commitToReadableMs?.p50 ?? Number.NaN)),
  p95: Throughput.median(runs.map((r) => r.commitToReadableMs?.p95 ?? Number.NaN)),
})

/** One case: every implementation at `producers` and `eventsPerTxn`, `settings.repeats` times. */
const measureCase = (
  server: BenchServer["Service"],
  settings: Throughput.Settings,
  producers: number,
  eventsPerTxn: number,
) =>
  Effect.gen(function* () {
    const batches = batchesOf(eventsPerTxn)
    const runs = yield* Rotation.rotate(implementations, settings.repeats, (implementation, repeat) =>
      Effect.gen(function* () {
        const r = yield* once(server, settings, implementation, producers, batches)
        const readable =
          r.commitToReadableMs === undefined
            ? ""
            : `, commit-to-readable p50 ${r.commitToReadableMs.p50} p95 ${r.commitToReadableMs.p95} ms, drained in ${r.drainSeconds} s`
        yield* Console.log(
          `${eventsPerTxn} ev/txn, ${producers} producers, ${implementation} #${repeat}: ${round0(r.eventsPerSecond)} ev/s (client ${r.clientCores} cores, machine ${Math.round(r.machineBusy * 100)}% busy)${readable}`,
        )
        return { repeat, ...r } satisfies RunResult
      }),
    )
    const median = (impl: Implementation) => Throughput.median(runs[impl].map((r) => r.eventsPerSecond))
    return {
      case: `${eventsPerTxn === 1 ? "single" : `batch${eventsPerTxn}`}-p${producers}`,
      producers,
      eventsPerTxn,
      eventsPerSecond: Rotation.mapOf(implementations, median),
      ratio: {
        oursOverNaive: median("ours") / median("naive"),
        oursOverPlain: median("ours") / median("plain"),
        postCommitOverPlain: median("postCommit") / median("plain"),
        postCommitOverOurs: median("postCommit") / median("ours"),
        inPlaceOverPlain: median("inPlace") / median("plain"),
        inPlaceOverPostCommit: median("inPlace") / median("postCommit"),
      },
      commitToReadableMs: {
        postCommit: readableOf(runs.postCommit),
        inPlace: readableOf(runs.inPlace),
      },
      clientCores: Rotation.mapOf(implementations, (impl) => Throughput.median(runs[impl].map((r) => r.clientCores))),
      runs,
    } satisfies Case
  })

const run = Effect.gen(function* () {
  const server = yield* BenchServer
  const settings = yield* Throughput.settings
  const cases: Array<Case> = []
  for (const eventsPerTxn of batchSizes) {
    for (const producers of producerCounts) cases.push(yield* measureCase(server, settings, producers, eventsPerTxn))
  }
  const wake = yield* WakeLatency.measure(server, settings)
  for (const mode of WakeLatency.wakeModes) {
    for (const d of wake[mode]) {
      yield* Console.log(
        `post_commit at ${WakeLatency.wakeRate}/s, ${mode} #${d.repeat}: commit-to-readable p50 ${d.p50} p95 ${d.p95} ms (${d.count} appends)`,
      )
    }
  }
  return report(cases, settings, wake)
})

export default {
  description:
    "events/s through EventLog.append, counter and post_commit, vs a naive counter and no counter (pg driver), 1/8/16/32 producers",
  run: Effect.gen(function* () {
    const server = yield* BenchServer
    return yield* run.pipe(Effect.provide(server.pool(1)))
  }),
} satisfies Benchmark
