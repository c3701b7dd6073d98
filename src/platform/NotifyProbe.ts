/**
 * Whether a LISTEN connection really hears NOTIFYs. Through a transaction pooler it does not: its
 * LISTEN ran on whichever server connection was free, and the pooler hands that one to others
 * afterwards, so notifications reach nobody (or a stranger, who drops them). Nothing fails: the
 * listener just never wakes. So the listener proves it can hear before it is trusted.
 *
 * The probe: LISTEN on `channel` on the connection, NOTIFY a payload of its own from the pool (a
 * session of another client), and wait for it within a bound. Never a NOTIFY from the listening
 * connection itself: a session hears its own NOTIFY with its own commit's answer, even through a
 * transaction pooler, which would pass the probe and hear nothing else.
 */
import { randomUUID } from "node:crypto"
import type { PgClient, PgConnection } from "@effect/sql-pg"
import { Duration, Effect, Queue } from "effect"

/** The channel probes go on: no subscriber listens to it. */
export const channel = "bothy_listen_probe"

/** How long a probe waits for its NOTIFY by default; a direct connection hears it in milliseconds. */
export const defaultTimeout = Duration.seconds(3)

/**
 * True when `connection` heard a NOTIFY sent through `pool` within `timeout`; false when it did not.
 * Fails only when the connection does (LISTEN, or the pool's NOTIFY).
 */
export const heard = (connection: PgConnection.PgConnection, pool: PgClient.PgClient, timeout: Duration.Input) =>
  Effect.scoped(
    Effect.gen(function* () {
      const queue = yield* connection.listen(channel)
      const token = randomUUID()
      yield* pool.notify(channel, token)
      const arrived = Queue.take(queue).pipe(Effect.repeat({ until: (n) => n.payload === token }), Effect.as(true))
      return yield* arrived.pipe(Effect.timeoutOrElse({ duration: timeout, orElse: () => Effect.succeed(false) }))
    }),
  )
