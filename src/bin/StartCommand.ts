/**
 * `bothy start` (`npm start`): the first run. It runs the worker exactly as `bothy worker` does
 * (`WorkerCommand`: the admin server with the status page and the API docs included), and, while the database is the embedded one, the
 * demo (`src/demo/`): a producer at `--rate` events a second, webhook subscriptions to a local
 * receiver that verifies every signature, a local push service that decrypts every message, APNs
 * and FCM stand-ins that verify the provider and access tokens, and a
 * progress line. Ctrl-C stops the producer, then the worker (running jobs finish or are put back),
 * then the embedded server, then the receiver and push service, and prints the summary last.
 *
 * With `DATABASE_URL` set, or `--no-demo`, no demo runs: never write demo data to a real database.
 */
import { Clock, Console, Effect, Logger, Option } from "effect"
import { Command, Flag } from "effect/cli"
import * as Demo from "../demo/Demo.ts"
import * as DemoCounts from "../demo/DemoCounts.ts"
import * as DemoEnvironment from "../demo/DemoEnvironment.ts"
import * as DemoNativeServices from "../demo/DemoNativeServices.ts"
import * as DemoProgress from "../demo/DemoProgress.ts"
import * as DemoPushService from "../demo/DemoPushService.ts"
import * as DemoReceiver from "../demo/DemoReceiver.ts"
import * as DemoSetup from "../demo/DemoSetup.ts"
import { InvalidConfig } from "../platform/BothyConfig.ts"
import * as Database from "../platform/Database.ts"
import * as WorkerCommand from "./WorkerCommand.ts"

const maxRate = 10_000

const withDemo = (rate: number) =>
  Effect.gen(function* () {
    const home = yield* Database.home
    const counts = DemoCounts.make()
    const terminal = process.stdout.isTTY === true
    let began: number | undefined
    const summary = Effect.suspend(() =>
      began === undefined
        ? Effect.void
        : Effect.flatMap(Clock.currentTimeMillis, (now) => Console.log(DemoProgress.summary(counts, now - began!))),
    )
    yield* Effect.gen(function* () {
      const loaded = yield* WorkerCommand.load
      // Acquired before the worker, so they are released after it: its last deliveries still land.
      const receiver = yield* DemoReceiver.start(counts, DemoSetup.kept(home))
      const push = yield* Option.match(loaded.push, {
        onNone: () => Effect.succeed(Option.none()),
        onSome: (vapid) =>
          Effect.gen(function* () {
            const service = yield* DemoPushService.start(counts, vapid.vapid.publicKey)
            const native = yield* DemoNativeServices.start(counts)
            // Always the stand-ins: the demo's devices are made up, and Apple or Google would refuse them.
            const settings = { ...vapid, apns: native.apns, fcm: native.fcm }
            return Option.some({ service, native, settings })
          }),
      })
      began = yield* Clock.currentTimeMillis
      const demo = Demo.layer({
        home,
        rate,
        counts,
        receiver,
        push,
        webhooks: loaded.webhooks,
        sequencing: loaded.settings.log?.sequencing ?? "counter",
        terminal,
      })
      const pushSettings = Option.map(push, (p) => p.settings)
      return yield* WorkerCommand.run({ ...loaded, push: pushSettings }, demo)
    }).pipe(
      Effect.scoped,
      Effect.ensuring(summary),
      Effect.provide(DemoEnvironment.layer(home)),
      terminal ? Effect.provide(Logger.layer([DemoProgress.terminalLogger])) : (self) => self,
    )
  })

export const start = Command.make(
  "start",
  {
    rate: Flag.Int("rate").pipe(
      Flag.withDescription(`events the demo appends per second (1 to ${maxRate})`),
      Flag.withDefault(20),
    ),
    demo: Flag.Boolean("demo").pipe(
      Flag.withDescription("run the demo (on the embedded database only); --no-demo runs the worker alone"),
      Flag.withDefault(true),
    ),
  },
  ({ rate, demo }) =>
    Effect.gen(function* () {
      if (!Number.isInteger(rate) || rate < 1 || rate > maxRate) {
        return yield* new InvalidConfig({ keys: ["--rate"], detail: `--rate ${rate}: expected 1 to ${maxRate}` })
      }
      const external = yield* Database.external
      if (demo && !external) return yield* withDemo(rate)
      if (demo) yield* Effect.logInfo("no demo: DATABASE_URL is set, and the demo writes to the embedded database only")
      return yield* WorkerCommand.run(yield* WorkerCommand.load)
    }),
).pipe(
  Command.withDescription(
    "The first run: the worker, the status page and, on the embedded database, a demo with a producer, a verifying webhook receiver and a local push service",
  ),
)
