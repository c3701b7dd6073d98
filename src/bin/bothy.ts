#!/usr/bin/env node
import { join } from "node:path"
/**
 * The `bothy` command. `worker` runs the long-lived process (see `Worker`); `migrate` applies
 * migrations and exits.
 * Without `DATABASE_URL` both start an embedded PostgreSQL under `.bothy/` and stop it on exit.
 *
 * SIGTERM and SIGINT interrupt the main fiber, so every finalizer runs (the embedded server stops
 * cleanly) and the process exits 0. An expected failure prints one line and exits 1.
 */
import { NodeRuntime, NodeServices } from "@effect/platform-node"
import { Cause, Console, Effect, Exit, Layer } from "effect"
import { Command } from "effect/cli"
import * as BothyConfig from "../BothyConfig.ts"
import * as Database from "../Database.ts"
import * as WebhookConfig from "../WebhookConfig.ts"
import * as Worker from "./Worker.ts"

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
    yield* Effect.logInfo(
      "bothy worker running (consumer: webhooks; job queue: webhooks); SIGTERM or Ctrl-C stops it",
    ).pipe(Effect.andThen(Effect.never), Effect.provide(Worker.layer(settings, webhooks)))
  }),
).pipe(Command.withDescription("Run the worker: migrations, log maintenance, the webhooks consumer and deliveries"))

const migrate = Command.make("migrate", {}, () =>
  Layer.build(Database.migrate).pipe(Effect.scoped, Effect.provide(Database.layer)),
).pipe(Command.withDescription("Apply pending database migrations and exit"))

const bothy = Command.make("bothy").pipe(
  Command.withDescription("bothy: a PostgreSQL event log whose consumers turn events into deliveries exactly once"),
  Command.withSubcommands([worker, migrate]),
)

/** Expected failures are one line; defects keep their full cause. */
const report = (cause: Cause.Cause<unknown>) => {
  if (Cause.hasInterruptsOnly(cause)) return Effect.void
  const error = Cause.findErrorOption(cause)
  return error._tag === "Some" && error.value instanceof Error
    ? Console.error(`bothy: ${error.value.message}`)
    : Console.error(Cause.pretty(cause))
}

Command.run(bothy, { version: "0.1.0" }).pipe(
  Effect.tapCause(report),
  // Empty variables are kept, so that a set-but-empty one is refused rather than read as unset.
  Effect.provide([NodeServices.layer, BothyConfig.environment]),
  NodeRuntime.runMain({
    disableErrorReporting: true,
    teardown: (exit, onExit) => onExit(Exit.isSuccess(exit) || Cause.hasInterruptsOnly(exit.cause) ? 0 : 1),
  }),
)
