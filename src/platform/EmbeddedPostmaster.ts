/**
 * The running server: the `postgres` process in its own process group, started in a scope that
 * stops it, and watched until it is ready.
 *
 * - Stopping never hangs: SIGINT (fast shutdown), then SIGQUIT, then SIGKILL of its process group if
 *   it does not exit in time; a server that already exited is not waited for.
 * - A bothy process that ends without its finalizers (a crash) still asks the server to stop.
 *
 *   stop: SIGINT -> exited? (60 s) -> SIGQUIT -> exited? (10 s) -> SIGKILL to the group
 */
import { existsSync, readFileSync } from "node:fs"
import { join } from "node:path"
import { Duration, Effect, Option, type Scope } from "effect"
import type * as EmbeddedBinaries from "./EmbeddedBinaries.ts"
import * as EmbeddedProcess from "./EmbeddedProcess.ts"
import { EmbeddedPortInUse, EmbeddedPostgresError, type StartError } from "./EmbeddedServerErrors.ts"
import * as EmbeddedServerOwner from "./EmbeddedServerOwner.ts"
import type * as EmbeddedServerUser from "./EmbeddedServerUser.ts"

// Line 8 of `postmaster.pid` (PostgreSQL 10 on), what `pg_ctl start` waits for: `ready`, or
// `standby` for a hot standby (a copy with `standby.signal`) accepting read-only connections.
const readyStatus = /^(ready|standby)\s*$/
const statusEvery = Duration.millis(50)
export const stopAfter = { sigint: Duration.seconds(60), sigquit: Duration.seconds(10) }

/** The lines of `dataDir`'s `postmaster.pid`: the pid first, the status eighth; none while there is none. */
const pidFile = (dataDir: string): ReadonlyArray<string> => {
  const file = join(dataDir, "postmaster.pid")
  try {
    return existsSync(file) ? readFileSync(file, "utf8").split("\n") : []
  } catch {
    return [] // removed between the look and the read
  }
}

/** The pid of a server running on `dataDir` now, by its `postmaster.pid`. */
export const livePostmaster = (dataDir: string) => {
  const [first] = pidFile(dataDir)
  if (first === undefined) return undefined
  const pid = Number(first)
  return EmbeddedServerOwner.isAlive(pid) ? pid : undefined
}

/** Stops the server: SIGINT, then SIGQUIT, then SIGKILL to its group, each after a wait. */
const stop = (postmaster: EmbeddedProcess.Watched) =>
  Effect.gen(function* () {
    const pid = postmaster.child.pid
    const exitsWithin = (d: Duration.Duration) =>
      Effect.map(
        Effect.timeoutOption(
          Effect.promise(() => postmaster.ended),
          d,
        ),
        Option.isSome,
      )
    const endedAlone = postmaster.hasEnded()
    if (!endedAlone) postmaster.child.kill("SIGINT")
    if (!(yield* exitsWithin(stopAfter.sigint))) {
      yield* Effect.logWarning(`embedded PostgreSQL (pid ${pid}) still running after SIGINT; sending SIGQUIT`)
      postmaster.child.kill("SIGQUIT")
      if (!(yield* exitsWithin(stopAfter.sigquit))) EmbeddedProcess.killGroup(pid)
    }
    // A postmaster that died on its own may leave backends behind for a moment.
    if (endedAlone) EmbeddedProcess.killGroup(pid)
  })

/** Whether `postmaster.pid` says the server of `pid` accepts connections. */
const statusReady = (dataDir: string, pid: number | undefined) => {
  const lines = pidFile(dataDir)
  return Number(lines[0]) === pid && readyStatus.test(lines[7] ?? "")
}

/**
 * Waits for the server to accept connections, by the status in `postmaster.pid` (its "ready to
 * accept connections" log line may never reach stderr: `logging_collector`, `log_destination` and
 * `lc_messages` are the server's settings); fails with why if it exits first.
 */
const ready = (postmaster: EmbeddedProcess.Watched, port: number, dataDir: string) =>
  Effect.raceFirst(
    Effect.callback<never, EmbeddedProcess.Ended>((resume) => {
      void postmaster.ended.then((end) => resume(Effect.fail(end)))
    }),
    Effect.gen(function* () {
      while (!statusReady(dataDir, postmaster.child.pid)) yield* Effect.sleep(statusEvery)
    }),
  ).pipe(
    Effect.mapError(
      (end): StartError =>
        // The port was free a moment ago; another process took it first.
        /Address already in use/.test(postmaster.recentLog())
          ? new EmbeddedPortInUse({ port })
          : new EmbeddedPostgresError({
              step: "start",
              dataDir,
              detail: `postgres: ${EmbeddedProcess.describeEnd(end)}: ${postmaster.recentLog()}`,
            }),
    ),
  )

export interface Postmaster {
  readonly watched: EmbeddedProcess.Watched
  /** The scope is stopping it: its exit is expected. */
  stopping: boolean
}

/** Starts `postgres` on `dataDir` and waits until it is ready; closing the scope stops it. */
export const run = (
  binaries: EmbeddedBinaries.Binaries,
  dataDir: string,
  port: number,
  settings: Readonly<Record<string, string>>,
  user: EmbeddedServerUser.ServerUser,
): Effect.Effect<Postmaster, StartError, Scope.Scope> =>
  Effect.gen(function* () {
    const postmaster = yield* Effect.acquireRelease(
      Effect.sync((): Postmaster => {
        const flags = Object.entries(settings).flatMap(([k, v]) => ["-c", `${k}=${v}`])
        const w = EmbeddedProcess.start(binaries.postgres, ["-D", dataDir, "-p", String(port), ...flags], user, "exit")
        // If bothy ends without running its finalizers (a crash), the server still stops.
        const onCrash = () => w.hasEnded() || w.child.kill("SIGINT")
        process.once("exit", onCrash)
        void w.ended.then(() => process.removeListener("exit", onCrash))
        return { watched: w, stopping: false }
      }),
      (p) =>
        Effect.suspend(() => {
          p.stopping = true
          return stop(p.watched).pipe(Effect.andThen(EmbeddedServerOwner.forget(dataDir)))
        }),
    )
    yield* ready(postmaster.watched, port, dataDir)
    return postmaster
  })
