/**
 * The embedded-server harness that the test run, the benchmarks and the chaos runs start their
 * PostgreSQL with: bothy's own embedded server (`EmbeddedPostgres.start`, the code `bothy worker`
 * runs) on a free port, its data in a fresh temporary folder.
 *
 * What it keeps true:
 * - Nothing outlives the scope: closing it stops the server, then removes its data (wherever
 *   `EmbeddedDataFolder` placed it) and the folder.
 * - `restart` stops the server as bothy stops its own (SIGINT, a fast shutdown: every connection
 *   is cut), waits, and starts it again on the same port and data.
 *
 * What differs between its users are options: the server settings (the tests' and the chaos
 * run's turn fsync off, the benchmarks' keep it on), whether the folder is open to the server's
 * OS user (as root the server runs as `postgres`; a benchmark's or chaos run's data stays in its
 * folder, while the tests keep theirs private, mode 0700, as a user's home is, and so exercise the
 * data fallback), where the binaries come from (a test starts it as a clone elsewhere would, or
 * an older major from its aliased package), and whether the start is quiet.
 */
import { chmodSync, mkdtempSync, rmSync } from "node:fs"
import { createServer } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Effect, Exit, Redacted, References, Scope } from "effect"
import * as EmbeddedPostgres from "../src/platform/EmbeddedPostgres.ts"

/**
 * A port on 127.0.0.1 that was free a moment ago. Listening on port 0 and closing again leaves a
 * small race with other processes; a start that loses it fails loudly (`EmbeddedPortInUse`).
 */
export const freePort = Effect.callback<number>((resume) => {
  const probe = createServer()
  probe.once("error", (e) => resume(Effect.die(e)))
  probe.listen(0, "127.0.0.1", () => {
    const address = probe.address()
    probe.close(() =>
      resume(typeof address === "object" && address !== null ? Effect.succeed(address.port) : Effect.die(address)),
    )
  })
})

/**
 * A fresh folder, removed with the scope: mode 0700, as `mkdtemp` makes it, or 0755 with `open`
 * (as root the server runs as the OS user `postgres`, which must enter it to reach data inside).
 */
export const tempFolder = (prefix: string, options: { readonly open?: boolean } = {}) =>
  Effect.acquireRelease(
    Effect.sync(() => {
      const dir = mkdtempSync(join(tmpdir(), prefix))
      if (options.open === true) chmodSync(dir, 0o755)
      return dir
    }),
    (dir) => Effect.sync(() => rmSync(dir, { recursive: true, force: true })),
  )

export type Locations = Pick<
  EmbeddedPostgres.EmbeddedPostgresOptions,
  "packageRoot" | "packageName" | "binariesCache" | "dataFallback"
>

export interface Options extends Locations {
  /** The temporary folder's name begins with it (`bothy-test-`). */
  readonly prefix: string
  /** Server settings (`-c name=value`). */
  readonly settings: Readonly<Record<string, string>>
  /** The folder open to the server's OS user (see `tempFolder`). */
  readonly openFolder?: boolean
  /** Log only warnings while starting (where the data went is noise in a test run). */
  readonly quiet?: boolean
}

export interface EmbeddedServer {
  readonly host: string
  readonly port: number
  readonly user: string
  readonly password: Redacted.Redacted
  /** The temporary folder the data directory was asked for in. */
  readonly folder: string
  /** Where the cluster lives now (its `postmaster.pid` names the server's process). */
  readonly dataDir: () => string
  /** URL of the maintenance database (`postgres`), with credentials. */
  readonly adminUrl: string
  /** URL of the database `name` on this server, with credentials. */
  readonly urlOf: (name: string) => string
  /** Stops the server, waits `downMillis`, and starts it again on the same port and data. */
  readonly restart: (downMillis: number) => Effect.Effect<void>
}

/** Starts the server for the scope. */
export const start = (options: Options) =>
  Effect.gen(function* () {
    const folder = yield* tempFolder(options.prefix, { open: options.openFolder === true })
    const serverOptions: EmbeddedPostgres.EmbeddedPostgresOptions = {
      ...(options.packageRoot === undefined ? {} : { packageRoot: options.packageRoot }),
      ...(options.packageName === undefined ? {} : { packageName: options.packageName }),
      ...(options.binariesCache === undefined ? {} : { binariesCache: options.binariesCache }),
      ...(options.dataFallback === undefined ? {} : { dataFallback: options.dataFallback }),
      dataDir: join(folder, "pg"),
      passwordFile: join(folder, "password"),
      port: yield* freePort,
      settings: options.settings,
    }
    // The server runs in a scope of its own, so that `restart` can stop it and start it again.
    let scope: Scope.Closeable | undefined
    const up = Effect.gen(function* () {
      scope = yield* Scope.make()
      const started = EmbeddedPostgres.start(serverOptions).pipe(Scope.provide(scope))
      return yield* options.quiet === true
        ? started.pipe(Effect.provideService(References.MinimumLogLevel, "Warn"))
        : started
    })
    const down = Effect.suspend(() => (scope === undefined ? Effect.void : Scope.close(scope, Exit.void)))
    const first = yield* up.pipe(Effect.onError(() => down))
    let dataDir = first.dataDir
    yield* Effect.addFinalizer(() =>
      Effect.andThen(
        down,
        Effect.sync(() => rmSync(dataDir, { recursive: true, force: true })),
      ),
    )
    const urlOf = (name: string) =>
      `postgres://${first.user}:${encodeURIComponent(Redacted.value(first.password))}@${first.host}:${first.port}/${name}`
    return {
      host: first.host,
      port: first.port,
      user: first.user,
      password: first.password,
      folder,
      dataDir: () => dataDir,
      adminUrl: urlOf("postgres"),
      urlOf,
      restart: (downMillis) =>
        Effect.gen(function* () {
          yield* down
          yield* Effect.sleep(downMillis)
          dataDir = (yield* Effect.orDie(up)).dataDir
        }),
    } satisfies EmbeddedServer
  })
