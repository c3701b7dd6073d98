/**
 * The PostgreSQL of a chaos run, owned by the harness so that it can restart it under the workers:
 * bothy's own embedded server (`EmbeddedPostgres.start`) on a free port, its data kept in the run's
 * folder across restarts (fsync off: the harness stops it cleanly, and this is a test of behaviour,
 * not of durability), removed at the end.
 *
 * `restart` stops the server as bothy stops its own (SIGINT, a fast shutdown: every connection is
 * cut), waits `downMillis`, and starts it again on the same port and data.
 */
import { chmodSync, mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Effect, Exit, Redacted, References, Scope } from "effect"
import { freePort } from "../bench/plumbing/BenchServer.ts"
import * as EmbeddedPostgres from "../src/platform/EmbeddedPostgres.ts"

/** Server settings of the run, part of its conditions. */
export const settings = {
  fsync: "off",
  synchronous_commit: "off",
  full_page_writes: "off",
  max_connections: "300",
} as const

export const database = "bothy"

export const start = Effect.gen(function* () {
  const dir = yield* Effect.acquireRelease(
    Effect.sync(() => {
      const made = mkdtempSync(join(tmpdir(), "bothy-chaos-"))
      // The server's OS user (`postgres`, as root) must reach the data folder inside.
      chmodSync(made, 0o755)
      return made
    }),
    (made) => Effect.sync(() => rmSync(made, { recursive: true, force: true })),
  )
  const port = yield* freePort
  const options: EmbeddedPostgres.EmbeddedPostgresOptions = {
    dataDir: join(dir, "pg"),
    passwordFile: join(dir, "password"),
    port,
    settings,
  }
  let scope = yield* Scope.make()
  const up = Effect.gen(function* () {
    scope = yield* Scope.make()
    return yield* EmbeddedPostgres.start(options).pipe(
      Effect.provideService(References.MinimumLogLevel, "Warn"),
      Scope.provide(scope),
      Effect.orDie,
    )
  })
  const down = Effect.suspend(() => Scope.close(scope, Exit.void))
  const first = yield* up
  let placedData = first.dataDir
  yield* Effect.addFinalizer(() =>
    Effect.andThen(
      down,
      Effect.sync(() => rmSync(placedData, { recursive: true, force: true })),
    ),
  )
  const password = encodeURIComponent(Redacted.value(first.password))
  const urlOf = (name: string) => `postgres://${first.user}:${password}@${first.host}:${first.port}/${name}`
  return {
    adminUrl: urlOf("postgres"),
    url: urlOf(database),
    port,
    restart: (downMillis: number) =>
      Effect.gen(function* () {
        yield* down
        yield* Effect.sleep(downMillis)
        placedData = (yield* up).dataDir
      }),
  }
})

export type ChaosServer = Effect.Success<typeof start>
