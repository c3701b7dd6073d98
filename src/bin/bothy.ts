#!/usr/bin/env node
/**
 * The `bothy` command. `worker` runs the long-lived process (see `Worker`); `migrate` applies
 * migrations and exits; a bare `bothy` prints its help and exits 0.
 * Without `DATABASE_URL` both start an embedded PostgreSQL under `BOTHY_HOME` and stop it on exit.
 *
 * SIGTERM and SIGINT interrupt the main fiber, so every finalizer runs (the embedded server, in its
 * own process group, stops last and cleanly) and the process exits 0. An expected failure prints
 * one line and exits 1; so does an embedded server that exits under a running worker.
 *
 * The log level is `--log-level` if given, else `BOTHY_LOG_LEVEL`, else info.
 */
import { join } from "node:path"
import { NodeRuntime, NodeServices } from "@effect/platform-node"
import { Cause, Console, Effect, Exit, Layer, type LogLevel, References, Result, Runtime } from "effect"
import { CliError, Command } from "effect/cli"
import * as LogFormat from "../ops/LogFormat.ts"
import * as MetricsEndpoint from "../ops/MetricsEndpoint.ts"
import * as Observability from "../ops/Observability.ts"
import * as Tracing from "../ops/Tracing.ts"
import * as BothyConfig from "../platform/BothyConfig.ts"
import * as Database from "../platform/Database.ts"
import * as WebhookConfig from "../webhooks/WebhookConfig.ts"
import * as OpsCommands from "./OpsCommands.ts"
import * as Worker from "./Worker.ts"

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

// Settings are validated before anything starts, so a bad value never leaves a server behind.
const worker = Command.make("worker", {}, () =>
  Effect.gen(function* () {
    const settings = yield* BothyConfig.load
    yield* WebhookConfig.checkRetention(settings.sync.eventRetention)
    // The embedded development server keeps its sealing key beside its data unless one is given.
    const key = (yield* Database.external)
      ? undefined
      : WebhookConfig.keyOrFile(join(yield* Database.home, "webhook-secret-key"))
    const webhooks = yield* WebhookConfig.load(key)
    const metrics = yield* MetricsEndpoint.loadAddress
    const tracing = yield* Tracing.load
    yield* Effect.gen(function* () {
      yield* Effect.logInfo(
        "bothy worker running (consumer: webhooks; job queue: webhooks); SIGTERM or Ctrl-C stops it",
      )
      // Runs until a signal interrupts it, or fails when the embedded server exits under it.
      return yield* (yield* Database.DatabaseServer).exited.pipe(
        Effect.onInterrupt(() => Effect.logInfo("bothy worker stopping: running jobs finish or are put back")),
      )
    }).pipe(
      Effect.provide(
        Observability.layer(metrics).pipe(
          Layer.provideMerge(Worker.layer(settings, webhooks)),
          // Below everything, so that the spans of the worker's shutdown are exported too.
          Layer.provide(Tracing.layer(tracing)),
        ),
      ),
    )
  }),
).pipe(Command.withDescription("Run the worker: migrations, log maintenance, the webhooks consumer and deliveries"))

const migrate = Command.make("migrate", {}, () =>
  Layer.build(Database.migrate).pipe(Effect.scoped, Effect.provide(Database.layer)),
).pipe(Command.withDescription("Apply pending database migrations and exit"))

const bothy = Command.make("bothy").pipe(
  Command.withDescription("bothy: a PostgreSQL event log whose consumers turn events into deliveries exactly once"),
  Command.withSubcommands([worker, migrate, OpsCommands.status, OpsCommands.alerts]),
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
  yield* Command.run(bothy, { version: "0.1.0" }).pipe(Effect.provideService(References.MinimumLogLevel, level))
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
