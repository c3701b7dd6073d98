/**
 * The fan-out on this code and on the code before the push-at-scale issue, in the same run: the
 * `fanOut` part (one event to BENCH_PUSH_FANOUT_MEMBERS registrations, the VAPID token reused and
 * signed for each request) run by each tree's own benchmark in a fresh child process
 * (`TreeBench`), in rotating order, BENCH_PUSH_BEFORE_REPEATS times each: pushes/s and CPU per push
 * (sender and PostgreSQL) with the token reused.
 *
 * The earlier tree is BENCH_PUSH_BEFORE_REF: 0892b04, the last commit of main before the issue's
 * changes (one job row per registration and event, `web-push` building each request, HTTP/1.1).
 * Its fan-out part measures what ours does, by the same definitions (`PushBurst`'s CPU note).
 */
import { Config, Console, Effect } from "effect"
import * as Throughput from "../harness/Throughput.ts"
import * as TreeBench from "../harness/TreeBench.ts"

export const settings = Config.all({
  repeats: Config.Int("BENCH_PUSH_BEFORE_REPEATS").pipe(Config.withDefault(3)),
  ref: Config.String("BENCH_PUSH_BEFORE_REF").pipe(Config.withDefault("0892b04")),
})

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

const round3 = (n: number) => Math.round(n * 1000) / 1000

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

const mediansOf = (runs: ReadonlyArray<BeforeRun>): BeforeRun => {
  const m = (f: (r: BeforeRun) => number) => round3(Throughput.median(runs.map(f)))
  return {
    pushesPerSecond: m((r) => r.pushesPerSecond),
    senderMsPerPush: m((r) => r.senderMsPerPush),
    serverMsPerPush: m((r) => r.serverMsPerPush),
    cpuMsPerPush: m((r) => r.cpuMsPerPush),
    signEachPushesPerSecond: m((r) => r.signEachPushesPerSecond),
  }
}

const fixed = (n: number, digits: number) => (Number.isFinite(n) ? n.toFixed(digits) : "n/a")

/** Both trees' runs, their medians and the table's rows (no target of its own: the fan-out part has them). */
export const measure = (fanOutMembers: number) =>
  Effect.gen(function* () {
    const config = yield* settings
    yield* Console.log(
      `before: the fan-out to ${fanOutMembers} on this tree and on ${config.ref}, ${config.repeats} repeats each`,
    )
    const trees = yield* TreeBench.oursAndBefore(config.ref, "BENCH_PUSH_BEFORE_REF")
    const env = { BENCH_PUSH_PARTS: "fanOut", BENCH_REPEATS: "1", BENCH_PUSH_FANOUT_MEMBERS: String(fanOutMembers) }
    const runs = yield* TreeBench.compare(trees, "push", env, config.repeats)
    const ours = runs.ours.map(runOf)
    const before = runs.before.map(runOf)
    const o = mediansOf(ours)
    const b = mediansOf(before)
    const row = (measure: string, unit: string, pick: (r: BeforeRun) => number, digits: number) => [
      measure,
      `fresh process per run; ours ${ours.map((r) => fixed(pick(r), digits)).join(", ")}; before ${before.map((r) => fixed(pick(r), digits)).join(", ")}`,
      unit,
      fixed(pick(o), digits),
      fixed(pick(b), digits),
      pick(b) > 0 ? fixed(pick(o) / pick(b), 2) : "n/a",
      "",
    ]
    return {
      results: { ours, before, medians: { ours: o, before: b } },
      conditions: {
        fanOutMembers,
        repeats: config.repeats,
        trees: trees.map((t) => ({ label: t.label, commit: t.commit, changed: t.changed ?? false })),
        run: "each run a fresh child process (bench/run.ts push, BENCH_PUSH_PARTS=fanOut, BENCH_REPEATS=1: one run with the token reused and one signing each request) with an embedded server of its own, the trees in rotating order",
      },
      rows: [
        row("before: fan-out, reused token", "pushes/s", (r) => r.pushesPerSecond, 1),
        row("before: CPU per push, sender + PostgreSQL", "ms", (r) => r.cpuMsPerPush, 3),
        row("before:   sender", "ms", (r) => r.senderMsPerPush, 3),
        row("before:   PostgreSQL", "ms", (r) => r.serverMsPerPush, 3),
        row("before: fan-out, signEach", "pushes/s", (r) => r.signEachPushesPerSecond, 1),
      ],
    }
  }).pipe(Effect.scoped)

export type BeforeResult = Effect.Success<ReturnType<typeof measure>>
