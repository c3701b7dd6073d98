/**
 * The verdict table a chaos run prints, and the `bench/results/chaos.json` it writes: conditions,
 * the schedule, faults injected by kind, figures, re-sends by cause, and `targets` (each count that
 * must be zero, its value, and whether it held), with examples of whatever did not hold.
 */
import type { RunResult } from "./ChaosRun.ts"
import * as FaultSchedule from "./FaultSchedule.ts"

export interface Target {
  readonly name: string
  readonly value: number
  readonly target: 0
  readonly held: boolean
}

export const targets = (result: RunResult): ReadonlyArray<Target> =>
  Object.entries(result.verdict.zeros).map(([name, value]) => ({ name, value, target: 0, held: value === 0 }))

export const passed = (result: RunResult) =>
  targets(result).every((t) => t.held) && result.controls.every((c) => c.value > 0)

const rows = (title: string, entries: ReadonlyArray<readonly [string, string | number]>) => [
  title,
  ...entries.map(([k, v]) => `  ${k.padEnd(34)} ${String(v).padStart(10)}`),
]

export const table = (result: RunResult): string => {
  const v = result.verdict
  return [
    ...rows("figures", Object.entries(v.figures)),
    ...rows("faults injected", Object.entries(FaultSchedule.countByKind(result.history.injected))),
    ...rows("re-sends and retries, by cause", Object.entries(v.resends)),
    ...rows(
      "targets (must be 0)",
      targets(result).map((t) => [t.name, `${t.value} ${t.held ? "ok" : "FAILED"}`] as const),
    ),
    ...rows(
      "negative controls (a planted fault each; its count must be above 0)",
      result.controls.map((c) => [`${c.name}: ${c.counts}`, `${c.value} ${c.value > 0 ? "ok" : "FAILED"}`] as const),
    ),
    ...Object.entries(v.examples).flatMap(([name, list]) => [`examples of ${name}:`, ...list.map((e) => `  ${e}`)]),
    ...result.unexpectedExits.map(
      (e) => `worker ${e.worker} exited unasked (${e.code ?? e.signal}): ${e.lastLines.slice(-400)}`,
    ),
    passed(result) ? "verdict: PASS" : "verdict: FAIL",
  ].join("\n")
}

const bigints = (_: string, value: unknown) => (typeof value === "bigint" ? value.toString() : value)

export const json = (result: RunResult, machine: Record<string, unknown>) =>
  JSON.stringify(
    {
      name: "chaos",
      conditions: { ...result.conditions, machine },
      timings: result.timings,
      schedule: result.schedule.split("\n"),
      faultsInjected: FaultSchedule.countByKind(result.history.injected),
      injected: result.history.injected,
      faultsFailed: result.history.failed,
      figures: result.verdict.figures,
      resends: result.verdict.resends,
      targets: targets(result),
      controls: result.controls,
      passed: passed(result),
      examples: result.verdict.examples,
      workerStarts: result.workerStarts,
      workerExitCodes: result.exitCodes,
      unexpectedExits: result.unexpectedExits,
      samples: result.samples,
    },
    bigints,
    2,
  )
