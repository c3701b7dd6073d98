/**
 * The cases of `append` (producers × events per transaction) and what one case holds: the four
 * implementations' runs and their medians, which the report and the table are made from.
 */
import type * as Throughput from "../harness/Throughput.ts"
import type { Readable } from "./PostCommit.ts"

export const producerCounts = [1, 8, 16, 32] as const
export const batchSizes = [1, 10] as const
export const implementations = ["ours", "postCommit", "inPlace", "naive", "plain"] as const
export type Implementation = (typeof implementations)[number]

export type RunResult = Throughput.Run & { readonly repeat: number; readonly verified: boolean } & Partial<Readable>

export interface Case {
  readonly case: string
  readonly producers: number
  readonly eventsPerTxn: number
  /** Medians over the repeats. */
  readonly eventsPerSecond: Record<Implementation, number>
  readonly ratio: {
    readonly oursOverNaive: number
    readonly oursOverPlain: number
    readonly postCommitOverPlain: number
    readonly postCommitOverOurs: number
    readonly inPlaceOverPlain: number
    readonly inPlaceOverPostCommit: number
  }
  /** Commit-to-readable p50 and p95 of the two post_commit placements, medians over the repeats, ms. */
  readonly commitToReadableMs: Record<"postCommit" | "inPlace", { readonly p50: number; readonly p95: number }>
  /** Medians of the CPU this process used, in cores: what each client costs. */
  readonly clientCores: Record<Implementation, number>
  readonly runs: Record<Implementation, ReadonlyArray<RunResult>>
}
