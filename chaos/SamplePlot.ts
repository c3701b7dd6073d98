/**
 * The plot of a run's samples (see Samples.ts): four panels over time (worker RSS, consumer lag,
 * pending deliveries and unfinished push jobs, PostgreSQL connections), written as SVG and turned
 * into PNG by Debian's `rsvg-convert` (package `librsvg2-bin`, installed with apt-get when it is
 * missing and the run is root). No plotting dependency: the picture is a few polylines.
 */
import { execFileSync } from "node:child_process"
import { writeFileSync } from "node:fs"
import type { Sample } from "./Samples.ts"

interface Series {
  readonly name: string
  readonly color: string
  readonly values: ReadonlyArray<number | null>
}

const colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"]
const width = 1000
const panelHeight = 200
const left = 70
const right = 160
const top = 30

const panel = (title: string, t: ReadonlyArray<number>, series: ReadonlyArray<Series>, y0: number) => {
  const all = series.flatMap((s) => s.values.filter((v): v is number => v !== null))
  const max = Math.max(1, ...all)
  const tMax = Math.max(1, ...t)
  const x = (v: number) => left + ((width - left - right) * v) / tMax
  const y = (v: number) => y0 + panelHeight - (panelHeight * v) / max
  const lines = series.map((s, k) => {
    const points = s.values
      .map((v, i) => (v === null ? undefined : `${x(t[i]!).toFixed(1)},${y(v).toFixed(1)}`))
      .filter((p) => p !== undefined)
      .join(" ")
    return `<polyline fill="none" stroke="${s.color}" stroke-width="1.5" points="${points}"/>
<text x="${width - right + 10}" y="${y0 + 15 + 16 * k}" font-size="12" fill="${s.color}">${s.name}</text>`
  })
  return `<text x="${left}" y="${y0 - 8}" font-size="14" font-weight="bold">${title}</text>
<rect x="${left}" y="${y0}" width="${width - left - right}" height="${panelHeight}" fill="none" stroke="#999"/>
<text x="${left - 6}" y="${y0 + 10}" font-size="11" text-anchor="end">${max}</text>
<text x="${left - 6}" y="${y0 + panelHeight}" font-size="11" text-anchor="end">0</text>
<text x="${width - right}" y="${y0 + panelHeight + 14}" font-size="11" text-anchor="end">${tMax.toFixed(0)} s</text>
${lines.join("\n")}`
}

export const svg = (samples: ReadonlyArray<Sample>) => {
  const t = samples.map((s) => s.t)
  const workers = Math.max(0, ...samples.map((s) => s.rssMiB.length))
  const consumers = [...new Set(samples.flatMap((s) => Object.keys(s.lag ?? {})))].sort()
  const panels = [
    panel(
      "worker RSS (MiB)",
      t,
      Array.from({ length: workers }, (_, k) => ({
        name: `worker ${k}`,
        color: colors[k % colors.length]!,
        values: samples.map((s) => s.rssMiB[k] ?? null),
      })),
      top,
    ),
    panel(
      "consumer lag (events)",
      t,
      consumers.map((c, k) => ({ name: c, color: colors[k]!, values: samples.map((s) => s.lag?.[c] ?? null) })),
      top + (panelHeight + 50),
    ),
    panel(
      "pending",
      t,
      [
        { name: "webhook deliveries", color: colors[0]!, values: samples.map((s) => s.pendingDeliveries) },
        { name: "push jobs", color: colors[1]!, values: samples.map((s) => s.pushUnfinished) },
      ],
      top + 2 * (panelHeight + 50),
    ),
    panel(
      "PostgreSQL connections",
      t,
      [{ name: "connections", color: colors[2]!, values: samples.map((s) => s.pgConnections) }],
      top + 3 * (panelHeight + 50),
    ),
  ]
  const height = top + 4 * (panelHeight + 50)
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" font-family="sans-serif">
<rect width="100%" height="100%" fill="white"/>
${panels.join("\n")}
</svg>
`
}

const hasConverter = () => {
  try {
    execFileSync("rsvg-convert", ["--version"], { stdio: "ignore" })
    return true
  } catch {
    return false
  }
}

/** Writes `<base>.svg` and, when `rsvg-convert` is there or can be installed, `<base>.png`; the files written. */
export const write = (samples: ReadonlyArray<Sample>, base: string): ReadonlyArray<string> => {
  writeFileSync(`${base}.svg`, svg(samples))
  if (!hasConverter() && process.getuid?.() === 0) {
    try {
      execFileSync("apt-get", ["install", "-y", "-q", "librsvg2-bin"], { stdio: "ignore" })
    } catch {
      // No package: the SVG stays the plot.
    }
  }
  if (!hasConverter()) return [`${base}.svg`]
  execFileSync("rsvg-convert", ["-o", `${base}.png`, `${base}.svg`])
  return [`${base}.svg`, `${base}.png`]
}
