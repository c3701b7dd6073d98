/**
 * A row lock held the way another session holds one: `take` (a `SELECT ... FOR UPDATE`) runs in a
 * transaction on a pooled connection of its own, which stays open until `release`. `hold` returns
 * once the lock is held.
 */
import { Deferred, Effect, Fiber } from "effect"
import { SqlClient } from "effect/sql"

export const hold = <E, R>(take: Effect.Effect<unknown, E, R>) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const locked = yield* Deferred.make<void>()
    const release = yield* Deferred.make<void>()
    const holder = yield* sql
      .withTransaction(
        Effect.gen(function* () {
          yield* take
          yield* Deferred.succeed(locked, undefined)
          yield* Deferred.await(release)
        }),
      )
      .pipe(Effect.forkChild)
    yield* Deferred.await(locked)
    return {
      /** True until `release`. */
      held: Effect.map(Deferred.isDone(release), (done) => !done),
      /** Ends the transaction, and with it the lock. */
      release: Deferred.succeed(release, undefined).pipe(Effect.andThen(Fiber.join(holder))),
    }
  })
