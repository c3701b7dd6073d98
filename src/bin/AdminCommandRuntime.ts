/**
 * What every admin command shares: the pool with its schema checked (never migrated; see
 * `AdminCommands`), `WebhookSubscriptions` on it, the `--json` flag and how a result is printed
 * (the API's JSON shape, or a table for people).
 */
import { join } from "node:path"
import { Console, Effect, Layer, Schema } from "effect"
import { Argument, Flag } from "effect/cli"
import { EventLog } from "../log/EventLog.ts"
import * as LogFormat from "../ops/LogFormat.ts"
import * as BothyConfig from "../platform/BothyConfig.ts"
import * as Database from "../platform/Database.ts"
import { WebhookSubscriptions } from "../webhooks/subscriptions/WebhookSubscriptions.ts"
import * as WebhookConfig from "../webhooks/WebhookConfig.ts"

/**
 * The webhook settings as the worker reads them: the embedded development server keeps its sealing
 * key beside its data unless one is given.
 */
export const loadWebhookSettings = Effect.gen(function* () {
  const key = (yield* Database.external)
    ? undefined
    : WebhookConfig.keyOrFile(join(yield* Database.home, "webhook-secret-key"))
  return yield* WebhookConfig.load(key)
})

/**
 * The pool (its schema checked, never changed) and `WebhookSubscriptions` on it, for one command;
 * with the log in the configured sequencing mode, for the operational event a disable appends.
 */
const WebhooksLive = Layer.unwrap(
  Effect.gen(function* () {
    const settings = yield* loadWebhookSettings
    const sequencing = (yield* BothyConfig.load).log?.sequencing ?? "counter"
    return WebhookSubscriptions.layer.pipe(
      Layer.provide(Layer.merge(WebhookConfig.WebhookConfig.layerWith(settings), EventLog.layerFor(sequencing))),
    )
  }),
).pipe(Layer.provideMerge(Database.checkMigrated), Layer.provideMerge(Database.layer))

/** Runs a command on the checked pool (or also `WebhookSubscriptions`), its logs on standard error. */
export const withDatabase = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  effect.pipe(
    Effect.provide(Database.checkMigrated),
    Effect.provide(Database.layer),
    Effect.provide(LogFormat.layerStderr()),
  )
export const withWebhooks = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  effect.pipe(Effect.provide(WebhooksLive), Effect.provide(LogFormat.layerStderr()))

export const json = Flag.Boolean("json").pipe(
  Flag.withDescription("print JSON, as the admin API answers (ids and seqs as strings)"),
  Flag.withDefault(false),
)

/** `value` as JSON in the API's shape, or `table()` for people. */
export const print = <A, I>(schema: Schema.Codec<A, I>, value: A, asJson: boolean, table: () => string) =>
  Console.log(asJson ? JSON.stringify(Schema.encodeSync(Schema.toCodecJson(schema))(value), null, 2) : table())

export const orDash = (value: unknown) => (value === null || value === undefined || value === "" ? "-" : String(value))

export const subscriptionId = Argument.String("id").pipe(Argument.withDescription("the subscription's id"))
export const deliveryId = Argument.String("delivery").pipe(
  Argument.withDescription("the delivery's id"),
  Argument.withSchema(Schema.BigIntFromString),
)
