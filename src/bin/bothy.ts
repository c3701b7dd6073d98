#!/usr/bin/env node
/**
 * The `bothy` command. `worker` runs the long-lived process (see `Worker`, `WorkerCommand`); `start`
 * (`npm start`) runs it with the status page and a demo on the embedded database (`StartCommand`); `migrate` applies
 * migrations and exits; `restore finalize` prepares a restored database (`RestoreFinalize`); a bare
 * `bothy` prints its help and exits 0.
 * Without `DATABASE_URL` both start an embedded PostgreSQL under `BOTHY_HOME` and stop it on exit.
 *
 * SIGTERM and SIGINT interrupt the main fiber, so every finalizer runs (the embedded server, in its
 * own process group, stops last and cleanly) and the process exits 0. An expected failure prints
 * one line and exits 1; so does an embedded server that exits under a running worker.
 *
 * The log level is `--log-level` if given, else `BOTHY_LOG_LEVEL`, else info.
 */
import { NodeRuntime, NodeServices } from "@effect/platform-node"
import { Cause, Console, Effect, Exit, Layer, type LogLevel, References, Result, Runtime } from "effect"
import { CliError, Command } from "effect/cli"
import * as LogFormat from "../ops/LogFormat.ts"
import * as RestoreFinalize from "../ops/RestoreFinalize.ts"
import * as BothyConfig from "../platform/BothyConfig.ts"
import * as Database from "../platform/Database.ts"
import * as PushConfig from "../push/PushConfig.ts"
import * as PushVapid from "../push/PushVapid.ts"
import * as AccessCommands from "./AccessCommands.ts"
import * as AdminCommands from "./AdminCommands.ts"
import * as OpsCommands from "./OpsCommands.ts"
import * as StartCommand from "./StartCommand.ts"
import * as WorkerCommand from "./WorkerCommand.ts"

const logLevels: Record<string, LogLevel.LogLevel> = {
  all: "All",
  trace: "Trace",
  debug: "Debug",
  info: "Info",
  warn: "Warn",
  warning: "Warn",
  error: "Error",
  fatal: "Fatal",
  none: "None",
}

/** `BOTHY_LOG_LEVEL`: the same names as `--log-level`. */
const logLevel = BothyConfig.setting("log_level", "info", (raw) => {
  const level = logLevels[raw.trim().toLowerCase()]
  return level === undefined
    ? Result.fail(`expected one of ${Object.keys(logLevels).join(", ")}`)
    : Result.succeed(level)
})

const worker = Command.make("worker", {}, () =>
  Effect.flatMap(WorkerCommand.load, (loaded) => WorkerCommand.run(loaded)),
).pipe(
  Command.withDescription(
    "Run the worker: migrations, retention, the webhooks and push consumers and their deliveries, /metrics, the admin API",
  ),
)

const migrate = Command.make("migrate", {}, () =>
  Layer.build(Database.migrate).pipe(Effect.scoped, Effect.provide(Database.layer)),
).pipe(Command.withDescription("Apply pending database migrations and exit"))

const pushKeys = Command.make("keys", {}, () =>
  Effect.gen(function* () {
    const pair = PushVapid.generate()
    yield* Console.log(
      [
        "# A new VAPID key pair for push. Keep the private key secret; the public key is the",
        "# applicationServerKey browsers subscribe with. Set a subject (mailto: or https:) too.",
        `${BothyConfig.envName(PushConfig.keys.publicKey)}=${pair.publicKey}`,
        `${BothyConfig.envName(PushConfig.keys.privateKey)}=${pair.privateKey}`,
        `${BothyConfig.envName(PushConfig.keys.subject)}=mailto:ops@example.com`,
      ].join("\n"),
    )
  }),
).pipe(Command.withDescription("Print a new VAPID key pair for push, as environment lines"))

const push = Command.make("push").pipe(
  Command.withDescription("Push notification tools"),
  Command.withSubcommands([pushKeys]),
)

// Migrations first: finalize's statements are written against the current schema, and a worker
// started afterwards would apply them anyway.
const restoreFinalize = Command.make("finalize", {}, () =>
  Effect.gen(function* () {
    const finalized = yield* RestoreFinalize.finalize()
    yield* Console.log(RestoreFinalize.lines(finalized).join("\n"))
  }).pipe(Effect.provide(Database.migrate), Effect.provide(Database.layer)),
).pipe(
  Command.withDescription(
    "After restoring the database from a backup: every consumer cursor to the head, a new log epoch, pending detaches finalized; run it before any worker or producer starts",
  ),
)

const restore = Command.make("restore").pipe(
  Command.withDescription("Database restore tools"),
  Command.withSubcommands([restoreFinalize]),
)

/** The package's version; the packaging test holds it equal to package.json's. */
export const version = "0.2.0"

const bothy = Command.make("bothy").pipe(
  Command.withDescription("bothy: a PostgreSQL event log whose consumers turn events into deliveries exactly once"),
  Command.withSubcommands([
    StartCommand.start,
    worker,
    migrate,
    push,
    restore,
    OpsCommands.status,
    OpsCommands.alerts,
    ...AdminCommands.all,
    ...AccessCommands.all,
  ]),
)

/** Expected failures are one line; defects keep their full cause; the CLI prints its own errors. */
const report = (cause: Cause.Cause<unknown>) => {
  if (Cause.hasInterruptsOnly(cause)) return Effect.void
  const error = Cause.findErrorOption(cause)
  if (error._tag === "Some" && CliError.isCliError(error.value)) return Effect.void
  return error._tag === "Some" && error.value instanceof Error
    ? Console.error(`bothy: ${error.value.message}`)
    : Console.error(Cause.pretty(cause))
}

Effect.gen(function* () {
  const level = yield* logLevel
  yield* Command.run(bothy, { version }).pipe(Effect.provideService(References.MinimumLogLevel, level))
}).pipe(
  Effect.tapCause(report),
  // Empty variables are kept, so that a set-but-empty one is refused rather than read as unset.
  Effect.provide([NodeServices.layer, BothyConfig.environment, LogFormat.layer()]),
  NodeRuntime.runMain({
    disableErrorReporting: true,
    // A bare `bothy` is a help request without errors, whose exit code is 0.
    teardown: (exit, onExit) =>
      onExit(
        Exit.isSuccess(exit) || Cause.hasInterruptsOnly(exit.cause)
          ? 0
          : Runtime.getErrorExitCode(Cause.squash(exit.cause)),
      ),
  }),
)
