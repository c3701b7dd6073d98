/**
 * `npm run chaos`: one chaos run (see ChaosRun.ts) with the flags of ChaosFlags.ts; prints the
 * schedule, then the verdict table, writes the result file, and exits 0 only if every target held.
 */
import { writeFileSync } from "node:fs"
import { cpus, loadavg, totalmem } from "node:os"
import { NodeRuntime } from "@effect/platform-node"
import { Effect } from "effect"
import * as ChaosFlags from "./ChaosFlags.ts"
import * as ChaosRun from "./ChaosRun.ts"
import * as Report from "./Report.ts"
import * as SamplePlot from "./SamplePlot.ts"

const main = Effect.gen(function* () {
  const flags = yield* Effect.try({
    try: () => ChaosFlags.parse(process.argv.slice(2), Date.now()),
    catch: (e) => e as ChaosFlags.InvalidFlag,
  })
  const loadBefore = loadavg()
  const result = yield* ChaosRun.run({
    seed: flags.seed,
    events: flags.events,
    kills: flags.kills,
    ratePerSecond: flags.rate,
    producers: 4,
    ...(flags.durationMillis === undefined ? {} : { durationMillis: flags.durationMillis }),
    drainTimeout: "15 minutes",
    sampleEvery: "10 seconds",
    log: (line) => console.log(line),
  })
  console.log(Report.table(result))
  const machine = {
    cpus: cpus().length,
    cpuModel: cpus()[0]?.model,
    memoryGiB: Math.round(totalmem() / 2 ** 30),
    loadAverageBefore: loadBefore,
    loadAverageAfter: loadavg(),
    node: process.version,
    date: new Date().toISOString(),
  }
  writeFileSync(flags.output, `${Report.json(result, machine)}\n`)
  console.log(`wrote ${flags.output}`)
  if (flags.durationMillis !== undefined) {
    const plotted = SamplePlot.write(result.samples, flags.output.replace(/\.json$/, ""))
    console.log(`plotted the samples: ${plotted.join(", ")}`)
  }
  if (!Report.passed(result)) process.exitCode = 1
}).pipe(
  Effect.catchTag("InvalidFlag", (e) =>
    Effect.sync(() => {
      console.error(e.message)
      process.exitCode = 2
    }),
  ),
)

NodeRuntime.runMain(main)
