/**
 * Implementations measured against each other take turns within each repeat, in an order that
 * rotates from one repeat to the next, so drift on a shared machine (a neighbour's load, a cache
 * warming up) falls on all of them alike rather than on whichever always runs first.
 */
import { Effect } from "effect"

/** `f` of every implementation, as a record keyed by them. */
export const mapOf = <I extends string, A>(implementations: ReadonlyArray<I>, f: (impl: I) => A) =>
  Object.fromEntries(implementations.map((impl) => [impl, f(impl)])) as Record<I, A>

/**
 * Runs `once` for every implementation `repeats` times (repeat numbered from 1), in the rotating
 * order, and gives back each implementation's runs in the order they ran.
 */
export const rotate = <I extends string, A, E, R>(
  implementations: ReadonlyArray<I>,
  repeats: number,
  once: (implementation: I, repeat: number) => Effect.Effect<A, E, R>,
) =>
  Effect.gen(function* () {
    const runs = mapOf(implementations, (): Array<A> => [])
    for (let repeat = 0; repeat < repeats; repeat++) {
      for (let i = 0; i < implementations.length; i++) {
        const implementation = implementations[(i + repeat) % implementations.length]!
        runs[implementation].push(yield* once(implementation, repeat + 1))
      }
    }
    return runs
  })
