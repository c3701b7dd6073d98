/**
 * The operator's commands beside the worker: `bothy status` (what the database holds, with no
 * worker running) and `bothy alerts render` (the alert rules from the running configuration).
 */
import { Console, Duration, Effect, FileSystem, Option } from "effect"
import { Command, Flag } from "effect/cli"
import * as AlertRules from "../ops/AlertRules.ts"
import * as Status from "../ops/Status.ts"
import * as StatusReport from "../ops/StatusReport.ts"
import * as BothyConfig from "../platform/BothyConfig.ts"
import * as Database from "../platform/Database.ts"

export const status = Command.make(
  "status",
  {
    json: Flag.Boolean("json").pipe(
      Flag.withDescription("print JSON (seqs as strings, ages in seconds)"),
      Flag.withDefault(false),
    ),
  },
  ({ json }) =>
    Effect.gen(function* () {
      const status = yield* Status.read()
      yield* Console.log((json ? StatusReport.json(status) : StatusReport.table(status)).trimEnd())
    }).pipe(Effect.provide(Database.layer)),
).pipe(
  Command.withDescription(
    "Print consumers, jobs, webhook subscriptions, push registrations and partitions, read from the database alone",
  ),
)

const render = Command.make(
  "render",
  {
    output: Flag.String("output").pipe(
      Flag.withDescription("write the rule file here (default: standard output)"),
      Flag.optional,
    ),
    runbookBase: Flag.String("runbook-base").pipe(
      Flag.withDescription(`where docs/operations.md is published (default ${AlertRules.defaultRunbookBase})`),
      Flag.withDefault(AlertRules.defaultRunbookBase),
    ),
  },
  ({ output, runbookBase }) =>
    Effect.gen(function* () {
      const settings = yield* BothyConfig.load
      const rules = AlertRules.render({ pendingAlertAfter: settings.consumer.pendingAlertAfter, runbookBase })
      if (Option.isNone(output)) return yield* Console.log(rules.trimEnd())
      yield* (yield* FileSystem.FileSystem).writeFileString(output.value, rules)
      yield* Effect.logInfo(
        `alert rules written to ${output.value} (consumer.pending_alert_after ${Duration.format(settings.consumer.pendingAlertAfter)})`,
      )
    }),
).pipe(Command.withDescription("Write the Prometheus alert rules for the running configuration"))

export const alerts = Command.make("alerts").pipe(
  Command.withDescription("Prometheus alert rules"),
  Command.withSubcommands([render]),
)
