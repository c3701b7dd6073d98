/**
 * For the waits no signal can end (a state another process writes to the database): polls
 * `observe` every `every` until `holds` accepts what it saw, and gives that back. It fails after
 * `within` with `NotEventually`, naming what it waited for and the last value seen: a guard
 * against a hang, not a speed target. Wherever a latch, queue or hook can say "done", wait on it
 * instead.
 */
import { Duration, Effect, Schema } from "effect"

export class NotEventually extends Schema.TaggedError<NotEventually>()("NotEventually", {
  what: Schema.String,
  within: Schema.String,
  last: Schema.String,
}) {
  override get message() {
    return `not within ${this.within}: ${this.what} (last seen: ${this.last})`
  }
}

const show = (value: unknown) => {
  try {
    return JSON.stringify(value, (_, v) => (typeof v === "bigint" ? `${v}n` : v)) ?? String(value)
  } catch {
    return String(value)
  }
}

export const eventually = <A, E, R>(
  observe: Effect.Effect<A, E, R>,
  holds: (value: A) => boolean,
  options: { readonly what: string; readonly within: Duration.Input; readonly every: Duration.Input },
): Effect.Effect<A, E | NotEventually, R> =>
  Effect.suspend(() => {
    let last: { readonly value: A } | undefined
    const poll: Effect.Effect<A, E, R> = Effect.flatMap(observe, (value) => {
      last = { value }
      return holds(value) ? Effect.succeed(value) : Effect.flatMap(Effect.sleep(options.every), () => poll)
    })
    return poll.pipe(
      Effect.timeoutOrElse({
        duration: options.within,
        orElse: () =>
          Effect.fail(
            new NotEventually({
              what: options.what,
              within: Duration.format(Duration.fromInputUnsafe(options.within)),
              last: last === undefined ? "nothing yet" : show(last.value),
            }),
          ),
      }),
    )
  })
