/**
 * The test run's embedded PostgreSQL: the kit's harness (`testkit/EmbeddedServer`) with the tests'
 * settings (fsync off: tests only) and its folder private, as a user's home is. Where the binaries
 * come from and where they and the data may go are parameters, so a test can start it exactly as a
 * clone in another folder would.
 */
import { Cause, Effect, Exit, Scope } from "effect"
import * as EmbeddedServer from "../../testkit/EmbeddedServer.ts"

export type Locations = EmbeddedServer.Locations

export const start = (locations: Locations = {}) =>
  Effect.map(
    EmbeddedServer.start({
      ...locations,
      prefix: "bothy-test-",
      settings: { fsync: "off", synchronous_commit: "off", full_page_writes: "off", max_connections: "400" },
      quiet: true,
    }),
    (server) => ({ server, adminUrl: server.adminUrl }),
  )

/**
 * `start` for a caller outside Effect (vitest's global setup): a failure rejects with an `Error`
 * that says what went wrong in one line, and leaves nothing running.
 */
export const startOrReject = async (locations: Locations = {}) => {
  const scope = Effect.runSync(Scope.make())
  const exit = await Effect.runPromiseExit(start(locations).pipe(Scope.provide(scope)))
  if (Exit.isSuccess(exit)) return { ...exit.value, stop: () => Effect.runPromise(Scope.close(scope, Exit.void)) }
  await Effect.runPromise(Scope.close(scope, exit))
  const error = Cause.squash(exit.cause)
  throw new Error(
    `the test suite's embedded PostgreSQL did not start (set DATABASE_URL_TEST to use another server): ${error instanceof Error ? error.message : Cause.pretty(exit.cause)}`,
  )
}
