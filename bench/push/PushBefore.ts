/**
 * The push figures on this code and on the code before the push-at-scale issue, in the same run,
 * each part run by each tree's own benchmark in a fresh child process (`TreeBench`), in rotating
 * order, BENCH_PUSH_BEFORE_REPEATS times each (BENCH_PUSH_BEFORE_PARTS says which):
 *
 *   fanOut:   one event to BENCH_PUSH_FANOUT_MEMBERS registrations: pushes/s and CPU per push
 *             (sender and PostgreSQL) with the VAPID token reused, and pushes/s signing each
 *   handoff:  BENCH_PUSH_BEFORE_HANDOFF_RATE events/s x BENCH_PUSH_MEMBERS registrations for
 *             BENCH_PUSH_SECONDS: (a) commit to job claimable p95, (b) commit to message p95,
 *             whether the backlog stayed flat and the producer held its rate
 *
 * The earlier tree is BENCH_PUSH_BEFORE_REF: 0892b04, the last commit of main before the issue's
 * changes (one job row per registration and event, `web-push` building each request, HTTP/1.1).
 * Its fan-out part measures what ours does, by the same definitions (`PushBurst`'s CPU note).
 */
import { Config, Console, Effect } from "effect"
import * as TreeBench from "../harness/TreeBench.ts"

export const settings = Config.all({
  repeats: Config.Int("BENCH_PUSH_BEFORE_REPEATS").pipe(Config.withDefault(3)),
  ref: Config.String("BENCH_PUSH_BEFORE_REF").pipe(Config.withDefault("0892b04")),
  parts: Config.String("BENCH_PUSH_BEFORE_PARTS").pipe(Config.withDefault("fanOut,handoff")),
  handoffRate: Config.Number("BENCH_PUSH_BEFORE_HANDOFF_RATE").pipe(Config.withDefault(200)),
})

/** The sizes the children run at, from the parent's settings (smoke sizes included). */
export interface ChildSizes {
  readonly fanOutMembers: number
  readonly members: number
  readonly seconds: number
  readonly warmupSeconds: number
}

/** The medians a tree's fan-out part reports for one arm (reused token, or signEach). */
interface ArmMedian {
  readonly pushesPerSecond: number
  readonly senderMsPerPush: number
  readonly serverMsPerPush: number
}

/** One child run's figures. */
export interface BeforeRun {
  readonly pushesPerSecond: number
  readonly senderMsPerPush: number
  readonly serverMsPerPush: number
  readonly cpuMsPerPush: number
  readonly signEachPushesPerSecond: number
}

/** One child's handoff figures. */
export interface HandoffRun {
  readonly claimableP95Ms: number
  readonly arrivedP95Ms: number
  readonly flat: boolean
  readonly rateHeld: boolean
  /** CPU of the worker's process (its producer thread included, the push service's left out) per event, ms. */
  readonly workerMsPerEvent: number
  /** CPU of the server's processes (the producer's backends included) per event, ms. */
  readonly serverMsPerEvent: number
}

const round3 = (n: number) => Math.round(n * 1000) / 1000

const handoffOf = (r: TreeBench.TreeResults): HandoffRun => {
  const h = r.results.handoff as {
    readonly median: {
      readonly jobClaimableMs: { readonly p95: number }
      readonly arrivedMs: { readonly p95: number }
    }
    readonly flatRuns: number
    readonly rateHeldRuns: number
    readonly runs: ReadonlyArray<{
      readonly achievedEventsPerSecond: number
      readonly cpu: { readonly workerCores: number; readonly serverCores: number }
    }>
  }
  // One repeat a child: its run is the figures'.
  const run = h.runs[0]!
  return {
    claimableP95Ms: h.median.jobClaimableMs.p95,
    arrivedP95Ms: h.median.arrivedMs.p95,
    flat: h.flatRuns > 0,
    rateHeld: h.rateHeldRuns > 0,
    workerMsPerEvent: round3((run.cpu.workerCores / run.achievedEventsPerSecond) * 1000),
    serverMsPerEvent: round3((run.cpu.serverCores / run.achievedEventsPerSecond) * 1000),
  }
}

const runOf = (r: TreeBench.TreeResults): BeforeRun => {
  const median = (r.results.fanOut as { readonly median: Record<"reused" | "signEach", ArmMedian> }).median
  return {
    pushesPerSecond: median.reused.pushesPerSecond,
    senderMsPerPush: median.reused.senderMsPerPush,
    serverMsPerPush: median.reused.serverMsPerPush,
    cpuMsPerPush: round3(median.reused.senderMsPerPush + median.reused.serverMsPerPush),
    signEachPushesPerSecond: median.signEach.pushesPerSecond,
  }
}

const figures = [
  "pushesPerSecond",
  "senderMsPerPush",
  "serverMsPerPush",
  "cpuMsPerPush",
  "signEachPushesPerSecond",
] as const satisfies ReadonlyArray<keyof BeforeRun>

/** Both trees' runs of each part asked, their medians and the table's rows (no targets: the other parts have them). */
export const measure = (sizes: ChildSizes) =>
  Effect.gen(function* () {
    const config = yield* settings
    const parts = new Set(config.parts.split(",").map((p) => p.trim()))
    yield* Console.log(
      `before: ${[...parts].join(", ")} on this tree and on ${config.ref}, ${config.repeats} repeats each`,
    )
    const trees = yield* TreeBench.oursAndBefore(config.ref, "BENCH_PUSH_BEFORE_REF")
    const fanOut = parts.has("fanOut")
      ? yield* TreeBench.compare(
          trees,
          "push",
          {
            BENCH_PUSH_PARTS: "fanOut",
            BENCH_REPEATS: "1",
            BENCH_PUSH_FANOUT_MEMBERS: String(sizes.fanOutMembers),
            // The earlier tree's push service decrypts every message: so does ours here, alike.
            BENCH_PUSH_FANOUT_VERIFY_EVERY: "1",
          },
          config.repeats,
        )
      : undefined
    const handoff = parts.has("handoff")
      ? yield* TreeBench.compare(
          trees,
          "push",
          {
            BENCH_PUSH_PARTS: "handoff",
            BENCH_REPEATS: "1",
            BENCH_PUSH_RATE: String(config.handoffRate),
            BENCH_PUSH_MEMBERS: String(sizes.members),
            BENCH_PUSH_SECONDS: String(sizes.seconds),
            BENCH_PUSH_WARMUP_SECONDS: String(sizes.warmupSeconds),
            BENCH_PUSH_BASELINE: "false",
            BENCH_PUSH_COMPARE_COOLDOWN: "none",
          },
          config.repeats,
        )
      : undefined
    const fanOutRuns = fanOut && { ours: fanOut.ours.map(runOf), before: fanOut.before.map(runOf) }
    const handoffRuns = handoff && { ours: handoff.ours.map(handoffOf), before: handoff.before.map(handoffOf) }
    const fanOutRow = fanOutRuns && TreeBench.comparisonRow(fanOutRuns.ours, fanOutRuns.before)
    const handoffRow = handoffRuns && TreeBench.comparisonRow(handoffRuns.ours, handoffRuns.before)
    const at = `${config.handoffRate}/s x ${sizes.members}`
    return {
      results: {
        fanOut: fanOutRuns && {
          ...fanOutRuns,
          medians: {
            ours: TreeBench.medians(fanOutRuns.ours, figures),
            before: TreeBench.medians(fanOutRuns.before, figures),
          },
        },
        handoff: handoffRuns && { rate: config.handoffRate, ...handoffRuns },
      },
      conditions: {
        ...sizes,
        parts: [...parts],
        handoffRate: config.handoffRate,
        repeats: config.repeats,
        trees: trees.map((t) => ({ label: t.label, commit: t.commit, changed: t.changed ?? false })),
        run: "each run a fresh child process (bench/run.ts push, BENCH_PUSH_PARTS=fanOut or handoff, BENCH_REPEATS=1; the fan-out runs once with the token reused and once signing each request, its push service decrypting every message in both trees; the handoff without its consumer baseline) with an embedded server of its own, the trees in rotating order",
      },
      rows: [
        ...(fanOutRow === undefined
          ? []
          : [
              fanOutRow("before: fan-out, reused token", "pushes/s", (r) => r.pushesPerSecond, 1),
              fanOutRow("before: CPU per push, sender + PostgreSQL", "ms", (r) => r.cpuMsPerPush, 3),
              fanOutRow("before:   sender", "ms", (r) => r.senderMsPerPush, 3),
              fanOutRow("before:   PostgreSQL", "ms", (r) => r.serverMsPerPush, 3),
              fanOutRow("before: fan-out, signEach", "pushes/s", (r) => r.signEachPushesPerSecond, 1),
            ]),
        ...(handoffRow === undefined
          ? []
          : [
              handoffRow(`before: (a) commit to claimable p95, ${at}`, "ms", (r) => r.claimableP95Ms, 1),
              handoffRow(`before: (b) commit to received p95, ${at}`, "ms", (r) => r.arrivedP95Ms, 1),
              handoffRow(`before: CPU per event, worker, ${at}`, "ms", (r) => r.workerMsPerEvent, 3),
              handoffRow(`before: CPU per event, PostgreSQL, ${at}`, "ms", (r) => r.serverMsPerEvent, 3),
              handoffRow(`before: backlog flat, ${at}`, "runs", (r) => (r.flat ? 1 : 0), 0),
              handoffRow(`before: producer held its rate, ${at}`, "runs", (r) => (r.rateHeld ? 1 : 0), 0),
            ]),
      ],
    }
  }).pipe(Effect.scoped)

export type BeforeResult = Effect.Success<ReturnType<typeof measure>>
