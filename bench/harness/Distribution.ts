/**
 * A latency sample summed up the same way everywhere: nearest-rank quantiles, NaN (a stamp that
 * never came) left out of the count rather than read as zero.
 */
import { round3 } from "./Figures.ts"

/** p50/p95/p99/max of a sample, nearest rank, in the sample's unit rounded to µs. */
export interface Distribution {
  readonly count: number
  readonly p50: number
  readonly p95: number
  readonly p99: number
  readonly max: number
  readonly mean: number
}

export const distribution = (values: ReadonlyArray<number>): Distribution => {
  const sorted = values.filter((v) => !Number.isNaN(v)).sort((a, b) => a - b)
  const at = (q: number) => round3(sorted[Math.max(0, Math.ceil(q * sorted.length) - 1)] ?? Number.NaN)
  const sum = sorted.reduce((s, v) => s + v, 0)
  return {
    count: sorted.length,
    p50: at(0.5),
    p95: at(0.95),
    p99: at(0.99),
    max: at(1),
    mean: round3(sorted.length === 0 ? Number.NaN : sum / sorted.length),
  }
}
