/**
 * bothy's settings, read from `BOTHY_...` environment variables (or given by a host app) and
 * validated before anything starts. A bad value is an `InvalidConfig` naming the key, its
 * variable and what was wrong, which the `bothy` command prints as one line before exiting.
 *
 * Cross-key rule: `consumer.pending_alert_after` must be strictly below `sync.event_retention`,
 * or the lag alert could only fire after the events it warns about are already gone.
 */
import { Config, Context, Duration, Effect, Layer, Option, Result, Schema } from "effect"

export interface Settings {
  readonly consumer: {
    readonly batchSize: number
    readonly pollInterval: Duration.Duration
    /** The least time between the starts of two wake-ups' rounds (`Consumer.ConsumerOptions.cooldown`). */
    readonly cooldown: Duration.Duration
    readonly pendingAlertAfter: Duration.Duration
  }
  readonly sync: { readonly eventRetention: Duration.Duration }
  readonly perf: { readonly pushHandoffP95: Duration.Duration }
}

export class InvalidConfig extends Schema.TaggedError<InvalidConfig>()("InvalidConfig", {
  /** The dotted keys involved, e.g. `consumer.batch_size`. */
  keys: Schema.Array(Schema.String),
  detail: Schema.String,
}) {
  override get message() {
    return `invalid configuration: ${this.detail}`
  }
}

type Parse<A> = (raw: string) => Result.Result<A, string>

const units: Record<string, number> = {
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
  d: 86_400_000,
  w: 604_800_000,
}
const unitAliases: ReadonlyArray<readonly [RegExp, string]> = [
  [/^(ms|millis?|milliseconds?)$/, "ms"],
  [/^(s|secs?|seconds?)$/, "s"],
  [/^(m|mins?|minutes?)$/, "m"],
  [/^(h|hrs?|hours?)$/, "h"],
  [/^(d|days?)$/, "d"],
  [/^(w|weeks?)$/, "w"],
]

/** Accepts `1s`, `1 s`, `250ms`, `1 hour`, `7d`, `2 weeks`, `0s`. */
export const parseDurationOrZero: Parse<Duration.Duration> = (raw) => {
  const match = /^\s*(\d+(?:\.\d+)?)\s*([a-z]+)\s*$/i.exec(raw)
  const unit = match ? unitAliases.find(([re]) => re.test(match[2]!.toLowerCase()))?.[1] : undefined
  if (!match || unit === undefined) return Result.fail(`expected a duration such as "500ms", "1s", "1h" or "7d"`)
  return Result.succeed(Duration.millis(Number(match[1]) * units[unit]!))
}

/** As `parseDurationOrZero`; the value must be above zero. */
export const parseDuration: Parse<Duration.Duration> = (raw) =>
  Result.flatMap(parseDurationOrZero(raw), (d) =>
    Duration.isGreaterThan(d, Duration.zero) ? Result.succeed(d) : Result.fail("expected a duration above zero"),
  )

export const parseCount =
  (min: number, max: number): Parse<number> =>
  (raw) => {
    const n = /^\s*\d+\s*$/.test(raw) ? Number(raw) : Number.NaN
    return Number.isSafeInteger(n) && n >= min && n <= max
      ? Result.succeed(n)
      : Result.fail(`expected a whole number from ${min} to ${max}`)
  }

export const parseText: Parse<string> = (raw) =>
  raw.trim().length > 0 ? Result.succeed(raw.trim()) : Result.fail("expected a non-empty value")

/** `consumer.batch_size` -> `BOTHY_CONSUMER_BATCH_SIZE` */
export const envName = (key: string) => `BOTHY_${key.replaceAll(".", "_").toUpperCase()}`

/** Reads one key from the environment (or its default) and parses it. */
export const setting = <A>(key: string, fallback: string, parse: Parse<A>) =>
  Config.String(envName(key)).pipe(
    Config.option,
    Effect.mapError((e) => new InvalidConfig({ keys: [key], detail: `${envName(key)} (${key}): ${e.message}` })),
    Effect.flatMap((raw) => {
      const value = Option.getOrElse(raw, () => fallback)
      return Effect.mapError(
        Effect.fromResult(parse(value)),
        (why) =>
          new InvalidConfig({ keys: [key], detail: `${envName(key)} (${key}) = ${JSON.stringify(value)}: ${why}` }),
      )
    }),
  )

/** The documented defaults (README's configuration table). */
export const defaults = {
  "consumer.batch_size": "500",
  "consumer.poll_interval": "1s",
  "consumer.cooldown": "50ms",
  "consumer.pending_alert_after": "1h",
  "sync.event_retention": "7d",
  "perf.push_handoff_p95": "50ms",
} as const

/** Checks the rules that span keys. */
export const check = (settings: Settings): Effect.Effect<Settings, InvalidConfig> =>
  Duration.isLessThan(settings.consumer.pendingAlertAfter, settings.sync.eventRetention)
    ? Effect.succeed(settings)
    : Effect.fail(
        new InvalidConfig({
          keys: ["consumer.pending_alert_after", "sync.event_retention"],
          detail: `consumer.pending_alert_after (${envName("consumer.pending_alert_after")} = ${Duration.format(settings.consumer.pendingAlertAfter)}) must be strictly below sync.event_retention (${envName("sync.event_retention")} = ${Duration.format(settings.sync.eventRetention)})`,
        }),
      )

export const load: Effect.Effect<Settings, InvalidConfig> = Effect.gen(function* () {
  const settings: Settings = {
    consumer: {
      batchSize: yield* setting("consumer.batch_size", defaults["consumer.batch_size"], parseCount(1, 100_000)),
      pollInterval: yield* setting("consumer.poll_interval", defaults["consumer.poll_interval"], parseDuration),
      cooldown: yield* setting("consumer.cooldown", defaults["consumer.cooldown"], parseDurationOrZero),
      pendingAlertAfter: yield* setting(
        "consumer.pending_alert_after",
        defaults["consumer.pending_alert_after"],
        parseDuration,
      ),
    },
    sync: { eventRetention: yield* setting("sync.event_retention", defaults["sync.event_retention"], parseDuration) },
    perf: { pushHandoffP95: yield* setting("perf.push_handoff_p95", defaults["perf.push_handoff_p95"], parseDuration) },
  }
  return yield* check(settings)
})

export class BothyConfig extends Context.Service<BothyConfig, Settings>()("bothy/BothyConfig") {
  /** Settings from the environment, validated. */
  static readonly layer = Layer.effect(BothyConfig, load)
  /** Settings a host app gives directly; the same cross-key check applies. */
  static readonly layerWith = (settings: Settings) => Layer.effect(BothyConfig, check(settings))
}
