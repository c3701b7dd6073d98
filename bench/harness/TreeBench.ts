/**
 * One benchmark part measured on two bothy trees in the same run: this checkout's and an earlier
 * commit's (the code before an issue), each in a fresh child process running that tree's own
 * `bench/run.ts` (its own harness, src/ and schema, on an embedded server of its own), in a
 * rotating order per repeat so neither always runs first on a machine warming or cooling.
 *
 *   compare:  for each repeat, for each tree in the repeat's order (`Rotation`), `run` it once
 *   run:      `node <root>/bench/run.ts <name>` with the part's settings, its output prefixed with
 *             the tree's label; the results file it writes (under a name of its own, through
 *             BENCH_RESULT_NAME) is read back and removed
 *
 * Both trees run cold in a fresh process, so a figure on one is comparable to the other's: an
 * earlier tree cannot be imported beside this one (two copies of every service, see `SourceTree`).
 */
import { spawn } from "node:child_process"
import { randomUUID } from "node:crypto"
import { copyFileSync, readFileSync, rmSync } from "node:fs"
import { join } from "node:path"
import { Console, Effect, Schema } from "effect"
import * as Rotation from "./Rotation.ts"
import * as SourceTree from "./SourceTree.ts"
import * as Throughput from "./Throughput.ts"

export class TreeBenchFailed extends Schema.TaggedError<TreeBenchFailed>()("TreeBenchFailed", {
  label: Schema.String,
  benchmark: Schema.String,
  detail: Schema.String,
}) {
  override get message() {
    return `bench ${this.benchmark} on the ${this.label} tree failed: ${this.detail}`
  }
}

export interface Tree {
  /** How the output and the results name it: "ours", "before". */
  readonly label: string
  readonly root: string
  readonly commit: string
  /** This checkout only: its src/ or migrations/ differ from `commit` (what ran is not that commit alone). */
  readonly changed?: boolean
}

/** What a run's results file holds that a comparison reads. */
export interface TreeResults {
  readonly results: Record<string, unknown>
  readonly targets: ReadonlyArray<{ readonly name: string; readonly value: unknown; readonly met: boolean }>
}

/** The last lines a failed child printed, for its error. */
const tail = (lines: ReadonlyArray<string>) => lines.slice(-8).join(" | ")

/** Runs benchmark `name` of `tree` once in a child with `env` added, and returns its results file. */
export const run = (tree: Tree, name: string, env: Readonly<Record<string, string>>) =>
  Effect.gen(function* () {
    const resultName = `tree-${tree.label}-${randomUUID().slice(0, 8)}`
    const file = join(tree.root, "bench", "results", `${resultName}.json`)
    const failed = (detail: string) => new TreeBenchFailed({ label: tree.label, benchmark: name, detail })
    yield* Console.log(`[${tree.label}] bench ${name} on ${tree.commit.slice(0, 10)}`)
    yield* Effect.acquireRelease(
      Effect.sync(() =>
        spawn(process.execPath, [join(tree.root, "bench", "run.ts"), name], {
          cwd: tree.root,
          env: { ...process.env, ...env, BENCH_RESULT_NAME: resultName },
          stdio: ["ignore", "pipe", "pipe"],
        }),
      ),
      // Interrupted: SIGINT lets the child stop its server; the exit is awaited below either way.
      (child) => Effect.sync(() => child.exitCode === null && child.signalCode === null && child.kill("SIGINT")),
    ).pipe(
      Effect.flatMap((child) =>
        Effect.callback<void, TreeBenchFailed>((resume) => {
          const printed: Array<string> = []
          const echo = (chunk: Buffer) => {
            for (const line of chunk
              .toString()
              .split("\n")
              .filter((l) => l.length > 0)) {
              printed.push(line)
              if (printed.length > 64) printed.shift()
              process.stdout.write(`  [${tree.label}] ${line}\n`)
            }
          }
          child.stdout?.on("data", echo)
          child.stderr?.on("data", echo)
          child.once("exit", (code, signal) =>
            resume(code === 0 ? Effect.void : Effect.fail(failed(`exited (${code ?? signal}): ${tail(printed)}`))),
          )
        }),
      ),
      Effect.scoped,
    )
    const read = yield* Effect.try({
      try: () => JSON.parse(readFileSync(file, "utf8")) as TreeResults,
      catch: (e) => failed(`no results file ${file}: ${String(e)}`),
    })
    rmSync(file, { force: true })
    return read
  })

/** `repeats` runs of benchmark `name` on each tree (`Rotation.rotate`'s order); each tree's results, in the order they ran. */
export const compare = <L extends string>(
  trees: ReadonlyArray<Tree & { readonly label: L }>,
  name: string,
  env: Readonly<Record<string, string>>,
  repeats: number,
) =>
  Rotation.rotate(
    trees.map((t) => t.label),
    repeats,
    (label, repeat) =>
      Effect.gen(function* () {
        yield* Console.log(`${name}: repeat ${repeat}/${repeats}, ${label}`)
        return yield* run(trees.find((t) => t.label === label)!, name, env)
      }),
  )

/**
 * This checkout and the earlier tree at `ref` (extracted whole for the scope), labelled "ours" and
 * "before". `harness` names files (from the root) copied from this checkout over the earlier
 * tree's: measuring code fixed since, so that both trees are counted the same way.
 */
export const oursAndBefore = (ref: string, variable: string, harness: ReadonlyArray<string> = []) =>
  Effect.map(
    SourceTree.checkout(ref, variable, { whole: true }),
    (before): ReadonlyArray<Tree & { readonly label: "ours" | "before" }> => {
      for (const file of harness) copyFileSync(join(SourceTree.here, file), join(before.root, file))
      return [
        { label: "ours", root: SourceTree.here, ...SourceTree.describeHere() },
        { label: "before", root: before.root, commit: before.commit },
      ]
    },
  )

const round3 = (n: number) => Math.round(n * 1000) / 1000

/** The median over `runs` of each figure named in `keys`, to three decimals. */
export const medians = <A, K extends keyof A>(runs: ReadonlyArray<A>, keys: ReadonlyArray<K>) =>
  Object.fromEntries(keys.map((k) => [k, round3(Throughput.median(runs.map((r) => Number(r[k]))))])) as Record<
    K,
    number
  >

const fixed = (n: number, digits: number) => (Number.isFinite(n) ? n.toFixed(digits) : "n/a")

/**
 * A table row (measure, case, unit, value, baseline, value/baseline, target) comparing the runs
 * of this tree and of the one before by `pick`: every run of each, then the medians and their ratio.
 */
export const comparisonRow =
  <A>(ours: ReadonlyArray<A>, before: ReadonlyArray<A>) =>
  (measure: string, unit: string, pick: (r: A) => number, digits: number, target = ""): ReadonlyArray<string> => {
    const o = Throughput.median(ours.map(pick))
    const b = Throughput.median(before.map(pick))
    const each = (runs: ReadonlyArray<A>) => runs.map((r) => fixed(pick(r), digits)).join(", ")
    return [
      measure,
      `fresh process per run; ours ${each(ours)}; before ${each(before)}`,
      unit,
      fixed(o, digits),
      fixed(b, digits),
      b > 0 ? fixed(o / b, 2) : "n/a",
      target,
    ]
  }
