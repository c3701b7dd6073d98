/**
 * The jobs a worker knows it holds: claimed and not yet recorded. A claim whose statement committed
 * but whose reply never came (the connection cut between the commit and the answer, as
 * `pg_terminate_backend` or a server restart can) leaves rows `running` under this worker's live
 * lease that no fiber of it runs, and the rescuer, which goes by leases, never puts them back (the
 * chaos run found 18 such jobs holding 3,651 deliveries). So once a claim has failed, the next
 * renewal more than a lease later puts back this worker's `running` rows that are not in hand
 * (`JobLease.releaseOrphans`), but only while no claim is in flight, and only rows claimed more
 * than a lease ago, so that an answer still on its way can never be overtaken.
 *
 *   claim sent ── claiming + 1
 *   claim answered ── its jobs in hand ── claiming - 1
 *   claim failed ── claiming - 1, in doubt since now
 *   outcome recorded (applied, stale, placeholder or lost) ── out of hand
 */
export interface JobsInHand {
  /** Around a claim: `claimed` with its jobs' ids once it is answered, `settled` always after. */
  readonly claiming: () => {
    readonly claimed: (ids: ReadonlyArray<bigint>) => void
    /** `failedAt`: the clock when the claim failed; none when it was answered. */
    readonly settled: (failedAt?: number) => void
  }
  readonly finished: (id: bigint) => void
  /**
   * What to put back at `now`: the ids in hand, when a claim failed more than `graceMillis` ago and
   * none is in flight; else `undefined`. `done` after a successful put-back ends that doubt.
   */
  readonly orphanCheck: (
    now: number,
    graceMillis: number,
  ) => { readonly inHand: ReadonlyArray<bigint>; readonly done: () => void } | undefined
}

export const make = (): JobsInHand => {
  const ids = new Set<bigint>()
  let inFlight = 0
  let doubtSince: number | undefined
  return {
    claiming: () => {
      inFlight++
      let open = true
      return {
        claimed: (claimed) => {
          for (const id of claimed) ids.add(id)
        },
        settled: (failedAt) => {
          if (open) inFlight--
          open = false
          if (failedAt !== undefined) doubtSince = failedAt
        },
      }
    },
    finished: (id) => {
      ids.delete(id)
    },
    orphanCheck: (now, graceMillis) => {
      const since = doubtSince
      if (since === undefined || inFlight > 0 || now - since <= graceMillis) return undefined
      return {
        inHand: [...ids],
        done: () => {
          if (doubtSince === since) doubtSince = undefined
        },
      }
    },
  }
}
