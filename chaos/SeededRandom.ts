/**
 * A small deterministic random source (mulberry32): the same seed gives the same world and the
 * same fault schedule, so a failing chaos run can be replayed with `--seed`. Not for secrets.
 */

export interface SeededRandom {
  /** A float in [0, 1). */
  readonly next: () => number
  /** An integer in [min, max], both included. */
  readonly int: (min: number, max: number) => number
  readonly pick: <A>(items: ReadonlyArray<A>) => A
  readonly chance: (p: number) => boolean
  /** `n` distinct items of `items` (all of them when `n` is larger), in random order. */
  readonly sample: <A>(items: ReadonlyArray<A>, n: number) => Array<A>
}

export const make = (seed: number): SeededRandom => {
  let state = seed >>> 0
  const next = () => {
    state = (state + 0x6d2b79f5) >>> 0
    let t = state
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
  const int = (min: number, max: number) => min + Math.floor(next() * (max - min + 1))
  const pick = <A>(items: ReadonlyArray<A>) => items[int(0, items.length - 1)]!
  const sample = <A>(items: ReadonlyArray<A>, n: number) => {
    const copy = [...items]
    for (let i = copy.length - 1; i > 0; i--) {
      const j = int(0, i)
      ;[copy[i], copy[j]] = [copy[j]!, copy[i]!]
    }
    return copy.slice(0, n)
  }
  return { next, int, pick, chance: (p) => next() < p, sample }
}
