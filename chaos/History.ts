/**
 * What the harness did and saw while faults ran, with wall-clock times (`Date.now()`, the clock
 * PostgreSQL's `clock_timestamp()` reads on this machine): every fault as injected, the windows in
 * which a grant was revoked (each edge as a pair: before the statement, after its commit, so a
 * check at a time between them may have seen either), the re-enablings, and the gap. The verdict
 * judges "allowed at its time" against these windows, never against bothy's own counters.
 */
import type * as FaultSchedule from "./FaultSchedule.ts"
import type * as World from "./World.ts"

export interface GrantWindow {
  readonly grant: World.Grant
  /** Before the revoke's statement / after its commit. */
  readonly revokeFrom: number
  readonly revokeTo: number
  /** Before the grant's statement / after its commit (the run's end when never restored). */
  restoreFrom: number
  restoreTo: number
}

export interface Injected {
  readonly kind: FaultSchedule.Kind
  readonly at: number
  readonly detail: string
}

export interface Gap {
  readonly at: number
  /** The consumers' cursors while they were held, below the old events. */
  readonly cursors: ReadonlyArray<{ readonly name: string; readonly lastSeq: bigint }>
  readonly dropped: ReadonlyArray<string>
}

export interface History {
  readonly injected: Array<Injected>
  readonly grantWindows: Array<GrantWindow>
  readonly resumes: Array<{ readonly subscription: string; readonly after: bigint; readonly at: number }>
  gap: Gap | undefined
  /** When the harness saw the doomed registration gone from the database (after its 410s). */
  pushRemovedAt: number | undefined
  /** Faults whose action could not be carried out (a finding about the harness, reported). */
  readonly failed: Array<{ readonly kind: FaultSchedule.Kind; readonly detail: string }>
}

export const empty = (): History => ({
  injected: [],
  grantWindows: [],
  resumes: [],
  gap: undefined,
  pushRemovedAt: undefined,
  failed: [],
})
