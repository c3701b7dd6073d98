/**
 * The test run's embedded PostgreSQL, started by the same code as `bothy worker`'s
 * (`EmbeddedPostgres.start`): a free port, data in a fresh temporary folder (fsync off: tests only),
 * removed when the scope closes. Where the binaries come from and where they and the data may go are
 * parameters, so a test can start it exactly as a clone in another folder would.
 */
import { mkdtempSync, rmSync } from "node:fs"
import { createServer } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Cause, Effect, Exit, Redacted, References, Scope } from "effect"
import * as EmbeddedPostgres from "../../src/platform/EmbeddedPostgres.ts"

export const freePort = Effect.callback<number>((resume) => {
  const server = createServer().listen(0, "127.0.0.1", () => {
    const address = server.address()
    server.close(() => resume(Effect.succeed(typeof address === "object" && address ? address.port : 0)))
  })
})

/** A fresh folder (mode 0700, as `mkdtemp` makes it), removed with the scope. */
export const tempFolder = (prefix: string) =>
  Effect.acquireRelease(
    Effect.sync(() => mkdtempSync(join(tmpdir(), prefix))),
    (dir) => Effect.sync(() => rmSync(dir, { recursive: true, force: true })),
  )

export type Locations = Pick<EmbeddedPostgres.EmbeddedPostgresOptions, "packageRoot" | "binariesCache" | "dataFallback">

export const start = (locations: Locations = {}) =>
  Effect.gen(function* () {
    const dir = yield* tempFolder("bothy-test-")
    const server = yield* EmbeddedPostgres.start({
      ...locations,
      dataDir: join(dir, "pg"),
      passwordFile: join(dir, "password"),
      port: yield* freePort,
      ephemeral: true,
      settings: { fsync: "off", synchronous_commit: "off", full_page_writes: "off", max_connections: "400" },
    }).pipe(Effect.provideService(References.MinimumLogLevel, "Warn")) // where the data went: noise in a test run
    const adminUrl = `postgres://${server.user}:${encodeURIComponent(Redacted.value(server.password))}@${server.host}:${server.port}/postgres`
    return { server, adminUrl }
  })

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
