/**
 * What a benchmark hands back, and how it is shown: a table on stdout, and
 * `bench/results/<name>.json` holding every figure with its conditions next to it (machine, disk,
 * PostgreSQL version and settings, and whatever the benchmark adds: durations, concurrency, batch
 * size, what the baseline was), so a number read later can be judged without rerunning it.
 */
import { mkdir, writeFile } from "node:fs/promises"
import { resolve } from "node:path"
import { Console, Effect } from "effect"
import type { ServerSettings } from "./BenchServer.ts"
import type { Machine, Storage } from "./Conditions.ts"

/** A goal from the issue, and whether this run met it; a yes/no goal has boolean value and target. */
export interface Target {
  readonly name: string
  readonly value: number | boolean
  readonly target: number | boolean
  readonly met: boolean
}

export interface Table {
  readonly columns: ReadonlyArray<string>
  readonly rows: ReadonlyArray<ReadonlyArray<string>>
}

export interface Report {
  /** Conditions specific to the benchmark; machine and server conditions are added by `write`. */
  readonly conditions: Record<string, unknown>
  readonly results: unknown
  readonly baseline: unknown
  readonly targets: ReadonlyArray<Target>
  readonly table: Table
}

/** Prints the table as Markdown, so it can be pasted into an issue or a PR as it is. */
export const print = (table: Table) => {
  const widths = table.columns.map((c, i) => Math.max(c.length, ...table.rows.map((r) => (r[i] ?? "").length)))
  const line = (cells: ReadonlyArray<string>) =>
    `| ${widths.map((w, i) => (i < 3 ? (cells[i] ?? "").padEnd(w) : (cells[i] ?? "").padStart(w))).join(" | ")} |`
  const rule = `|${widths.map((w, i) => (i < 3 ? `${"-".repeat(w + 1)} ` : ` ${"-".repeat(w)}:`)).join("|")}|`
  return Console.log([line(table.columns), rule, ...table.rows.map(line)].join("\n"))
}

/** Writes `bench/results/<name>.json` and returns its path. */
export const write = (input: {
  readonly name: string
  readonly date: Date
  readonly machine: { readonly atStart: Machine; readonly atEnd: Machine }
  readonly storage: Storage
  readonly settings: ServerSettings
  readonly report: Report
}) =>
  Effect.promise(async () => {
    const { server_version: version, ...settings } = input.settings
    const { loadAverage, ...machine } = input.machine.atStart
    const json = {
      name: input.name,
      date: input.date.toISOString(),
      conditions: {
        machine: { ...machine, loadAverage: { atStart: loadAverage, atEnd: input.machine.atEnd.loadAverage } },
        postgres: { version, settings, storage: input.storage },
        ...input.report.conditions,
      },
      results: input.report.results,
      baseline: input.report.baseline,
      targets: input.report.targets,
    }
    const dir = resolve(import.meta.dirname, "../results")
    await mkdir(dir, { recursive: true })
    const file = resolve(dir, `${input.name}.json`)
    await writeFile(file, `${JSON.stringify(json, null, 2)}\n`)
    return file
  })
