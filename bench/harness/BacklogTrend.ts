/**
 * Whether a backlog sampled once a second stayed flat: the least-squares slope of its samples over
 * the measured window, against a limit (a share of the offered rate). A backlog that only wobbles
 * has a slope near zero; one that the path cannot keep up with grows by the shortfall each second.
 */
import { Duration, Effect } from "effect"

/** Least-squares slope of `y` over `t`, per second. */
export const slope = (points: ReadonlyArray<{ readonly t: number; readonly y: number }>) => {
  const n = points.length
  if (n < 2) return Number.NaN
  const mt = points.reduce((s, p) => s + p.t, 0) / n
  const my = points.reduce((s, p) => s + p.y, 0) / n
  const num = points.reduce((s, p) => s + (p.t - mt) * (p.y - my), 0)
  const den = points.reduce((s, p) => s + (p.t - mt) ** 2, 0)
  return den === 0 ? Number.NaN : num / den
}

const round3 = (n: number) => Math.round(n * 1000) / 1000

/** First, last and largest sample of `pick`, its slope per second, and whether that is at most `limit`. */
export const series = <S extends { readonly t: number }>(
  samples: ReadonlyArray<S>,
  pick: (s: S) => number,
  limit: number,
) => {
  const values = samples.map(pick)
  const perSecond = slope(samples.map((s) => ({ t: s.t, y: pick(s) })))
  return {
    first: values[0] ?? Number.NaN,
    last: values.at(-1) ?? Number.NaN,
    max: values.length === 0 ? Number.NaN : Math.max(...values),
    slopePerSecond: round3(perSecond),
    flat: perSecond <= limit,
  }
}

/**
 * Forks a fiber that takes `sample` at `t0 + k` seconds (`performance.now()`) for k = 0, 1, … and
 * pushes each into `into`, until interrupted. A sample that takes longer than a second delays the
 * next ones, which then catch up at once.
 */
export const everySecond = <S, E, R>(t0: number, sample: Effect.Effect<S, E, R>, into: Array<S>) =>
  Effect.gen(function* () {
    for (let k = 0; ; k++) {
      const wait = t0 + k * 1000 - performance.now()
      if (wait > 0) yield* Effect.sleep(Duration.millis(Math.ceil(wait)))
      into.push(yield* sample)
    }
  }).pipe(Effect.forkChild)
