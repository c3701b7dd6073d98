/**
 * bothy's settings, read from `BOTHY_...` environment variables (or given by a host app) and
 * validated before anything starts. A bad value is an `InvalidConfig` naming the key, its
 * variable and what was wrong, which the `bothy` command prints as one line before exiting.
 *
 * A variable that is set but empty (or blank) is an error, never "use the default": a deploy
 * whose secret failed to render must not quietly start on defaults, or on a local database.
 * Effect's environment provider treats an empty value as missing unless told otherwise, so the
 * `bothy` command reads the environment through `environment`, and a host app that wants the
 * same provides it too.
 *
 * Every duration has bounds (`durationBounds`, with the reason for each), and rules that span
 * keys: `consumer.pending_alert_after` must be strictly below `sync.event_retention`, or the lag
 * alert could only fire after the events it warns about are already gone; `consumer.cooldown`
 * must be strictly below `consumer.poll_interval`, or a wake-up could be held back longer than the
 * poll that is meant to catch up on lost ones.
 */
import { Config, ConfigProvider, Context, Duration, Effect, Layer, Option, Redacted, Result, Schema } from "effect"

export interface Settings {
  readonly consumer: {
    readonly batchSize: number
    readonly pollInterval: Duration.Duration
    /** The least time between the starts of two wake-ups' rounds (`Consumer.ConsumerOptions.cooldown`). */
    readonly cooldown: Duration.Duration
    readonly pendingAlertAfter: Duration.Duration
  }
  readonly sync: { readonly eventRetention: Duration.Duration }
  /**
   * How appends get their seqs (`EventLog`'s header): `counter`, numbered in the append and its
   * commit serialized, or `post_commit`, numbered afterwards by a sequencer. Absent: `counter`.
   */
  readonly log?: { readonly sequencing: LogSequencing }
  /**
   * The job runtime (`JobWorker`): `lease`, how long a worker's jobs survive its silence (no
   * renewal) before another worker puts them back. Absent: 10 s.
   */
  readonly jobs?: { readonly lease: Duration.Duration }
}

/**
 * How appends get their seqs, the values of `log.sequencing` (`EventLog`'s header says how each
 * mode works). The concept is the log's, but it is declared here: the settings need it, and
 * platform/ imports no other part (`.dependency-cruiser.cjs`, `platform-is-the-bottom`).
 */
export const logSequencings = ["counter", "post_commit"] as const
export type LogSequencing = (typeof logSequencings)[number]

export class InvalidConfig extends Schema.TaggedError<InvalidConfig>()("InvalidConfig", {
  /** The dotted keys involved, e.g. `consumer.batch_size`. */
  keys: Schema.Array(Schema.String),
  detail: Schema.String,
}) {
  override get message() {
    return `invalid configuration: ${this.detail}`
  }
}

/** The process environment with empty values kept, so that `variable` can refuse them. */
export const environment = ConfigProvider.layer(ConfigProvider.fromEnv({ preserveEmptyStrings: true }))

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

export interface DurationBounds {
  readonly min: Duration.Duration
  readonly max: Duration.Duration
}

const within = (d: Duration.Duration, { min, max }: DurationBounds): Result.Result<Duration.Duration, string> =>
  Duration.isGreaterThanOrEqualTo(d, min) && Duration.isLessThanOrEqualTo(d, max)
    ? Result.succeed(d)
    : Result.fail(`expected a duration from ${Duration.format(min)} to ${Duration.format(max)}`)

/** As `parseDurationOrZero`, within `bounds` (inclusive). */
export const parseDurationWithin =
  (bounds: DurationBounds): Parse<Duration.Duration> =>
  (raw) =>
    Result.flatMap(parseDurationOrZero(raw), (d) => within(d, bounds))

export const parseCount =
  (min: number, max: number): Parse<number> =>
  (raw) => {
    const n = /^\s*\d+\s*$/.test(raw) ? Number(raw) : Number.NaN
    return Number.isSafeInteger(n) && n >= min && n <= max
      ? Result.succeed(n)
      : Result.fail(`expected a whole number from ${min} to ${max}`)
  }

/** One of `choices`, exactly as written. */
export const parseOneOf =
  <const A extends string>(choices: ReadonlyArray<A>): Parse<A> =>
  (raw) =>
    choices.includes(raw.trim() as A)
      ? Result.succeed(raw.trim() as A)
      : Result.fail(`expected one of ${choices.map((c) => JSON.stringify(c)).join(", ")}`)

export const parseText: Parse<string> = (raw) =>
  raw.trim().length > 0 ? Result.succeed(raw.trim()) : Result.fail("expected a non-empty value")

/** A comma-separated list; blank entries are dropped. */
export const parseList: Parse<ReadonlyArray<string>> = (raw) =>
  Result.succeed(
    raw
      .split(",")
      .map((s) => s.trim())
      .filter((s) => s.length > 0),
  )

export const parseFlag: Parse<boolean> = (raw) =>
  /^(true|1|yes)$/i.test(raw.trim())
    ? Result.succeed(true)
    : /^(false|0|no)$/i.test(raw.trim())
      ? Result.succeed(false)
      : Result.fail("expected true or false")

/** `consumer.batch_size` -> `BOTHY_CONSUMER_BATCH_SIZE` */
export const envName = (key: string) => `BOTHY_${key.replaceAll(".", "_").toUpperCase()}`

const named = (name: string, key: string) => (name === key ? name : `${name} (${key})`)

/**
 * Reads one environment variable. Unset is `None`; set but empty or blank is an `InvalidConfig`
 * that names it and says what unsetting it would mean (`unset`), since an empty value is far more
 * often a template that failed to render than a wish for the default.
 *
 * The value is `Redacted` and no message quotes it: the same reader serves secrets.
 */
export const variable = (
  name: string,
  options: { readonly key?: string; readonly unset: string },
): Effect.Effect<Option.Option<Redacted.Redacted<string>>, InvalidConfig> => {
  const key = options.key ?? name
  const invalid = (why: string) => new InvalidConfig({ keys: [key], detail: `${named(name, key)} ${why}` })
  return Config.Redacted(name).pipe(
    Config.option,
    // An environment read fails only when the variable is missing, which `option` already covers;
    // anything else is reported without the provider's own message, which might quote the value.
    Effect.mapError(() => invalid("could not be read")),
    Effect.flatMap((raw) =>
      Option.isSome(raw) && Redacted.value(raw.value).trim() === ""
        ? Effect.fail(invalid(`is set but empty; unset it ${options.unset}, or give a value`))
        : Effect.succeed(raw),
    ),
  )
}

/** Reads one key from the environment (or its default) and parses it. */
export const setting = <A>(key: string, fallback: string, parse: Parse<A>) =>
  variable(envName(key), {
    key,
    unset: fallback === "" ? "for none" : `to use the default ${JSON.stringify(fallback)}`,
  }).pipe(
    Effect.flatMap((raw) => {
      const value = Option.match(raw, { onNone: () => fallback, onSome: Redacted.value })
      return Effect.mapError(
        Effect.fromResult(parse(value)),
        (why) =>
          new InvalidConfig({ keys: [key], detail: `${envName(key)} (${key}) = ${JSON.stringify(value)}: ${why}` }),
      )
    }),
  )

/** The documented defaults (docs/configuration.md, generated from these). */
export const defaults = {
  "consumer.batch_size": "500",
  "consumer.poll_interval": "1s",
  "consumer.cooldown": "50ms",
  "consumer.pending_alert_after": "1h",
  "sync.event_retention": "7d",
  "log.sequencing": "counter",
  "jobs.lease": "10s",
} as const

/** The documented bounds of each duration setting (docs/configuration.md, generated from these), inclusive. */
export const durationBounds = {
  // Below 10 ms an idle worker queries the database a hundred times a second per consumer; above
  // 10 minutes an event whose NOTIFY was lost waits that long, and the listener is never trusted.
  "consumer.poll_interval": { min: Duration.millis(10), max: Duration.minutes(10) },
  // 0 turns it off. A cooldown batches a stream of wake-ups by holding each round back; past a
  // few seconds it batches nothing more and only delays every event. (Also below the poll interval.)
  "consumer.cooldown": { min: Duration.zero, max: Duration.seconds(10) },
  // Below a minute it pages on ordinary bursts; an alert a month late is no alert. (Also below
  // the retention.)
  "consumer.pending_alert_after": { min: Duration.minutes(1), max: Duration.days(30) },
  // The log is partitioned by day, so less than a day cannot be kept as asked; past ten years it
  // holds thousands of partitions, which PostgreSQL plans every query over.
  "sync.event_retention": { min: Duration.days(1), max: Duration.days(3650) },
  // Renewals go out every third of the lease and a worker stops its jobs a sixth before it lapses:
  // below 3 s that margin is half a second, which one slow statement or pause eats, stopping every
  // job. A dead process's jobs come back within about a second whatever the lease (its backend is
  // gone); the lease is how long a hung one holds them, and past 10 minutes that is too long.
  "jobs.lease": { min: Duration.seconds(3), max: Duration.minutes(10) },
} as const satisfies Record<string, DurationBounds>

type DurationKey = keyof typeof durationBounds

const batchSize = { min: 1, max: 100_000 }

const cross = (
  below: DurationKey,
  belowValue: Duration.Duration,
  above: DurationKey,
  aboveValue: Duration.Duration,
): Effect.Effect<void, InvalidConfig> =>
  Duration.isLessThan(belowValue, aboveValue)
    ? Effect.void
    : Effect.fail(
        new InvalidConfig({
          keys: [below, above],
          detail: `${below} (${envName(below)} = ${Duration.format(belowValue)}) must be strictly below ${above} (${envName(above)} = ${Duration.format(aboveValue)})`,
        }),
      )

const bounded = (key: DurationKey, value: Duration.Duration): Effect.Effect<void, InvalidConfig> =>
  Effect.mapError(
    Effect.fromResult(within(value, durationBounds[key])),
    (why) => new InvalidConfig({ keys: [key], detail: `${key} (${envName(key)}) = ${Duration.format(value)}: ${why}` }),
  )

/** Checks each value's bounds (for settings a host gives directly) and the rules that span keys. */
export const check = (settings: Settings): Effect.Effect<Settings, InvalidConfig> =>
  Effect.gen(function* () {
    const { consumer, sync } = settings
    if (
      !Number.isSafeInteger(consumer.batchSize) ||
      consumer.batchSize < batchSize.min ||
      consumer.batchSize > batchSize.max
    ) {
      return yield* new InvalidConfig({
        keys: ["consumer.batch_size"],
        detail: `consumer.batch_size = ${consumer.batchSize}: expected a whole number from ${batchSize.min} to ${batchSize.max}`,
      })
    }
    yield* bounded("consumer.poll_interval", consumer.pollInterval)
    yield* bounded("consumer.cooldown", consumer.cooldown)
    yield* bounded("consumer.pending_alert_after", consumer.pendingAlertAfter)
    yield* bounded("sync.event_retention", sync.eventRetention)
    if (settings.jobs !== undefined) yield* bounded("jobs.lease", settings.jobs.lease)
    if (settings.log !== undefined && !logSequencings.includes(settings.log.sequencing)) {
      return yield* new InvalidConfig({
        keys: ["log.sequencing"],
        detail: `log.sequencing = ${JSON.stringify(settings.log.sequencing)}: expected one of ${logSequencings.join(", ")}`,
      })
    }
    yield* cross(
      "consumer.pending_alert_after",
      consumer.pendingAlertAfter,
      "sync.event_retention",
      sync.eventRetention,
    )
    yield* cross("consumer.cooldown", consumer.cooldown, "consumer.poll_interval", consumer.pollInterval)
    return settings
  })

const durationSetting = (key: DurationKey) => setting(key, defaults[key], parseDurationWithin(durationBounds[key]))

export const load: Effect.Effect<Settings, InvalidConfig> = Effect.gen(function* () {
  const settings: Settings = {
    consumer: {
      batchSize: yield* setting(
        "consumer.batch_size",
        defaults["consumer.batch_size"],
        parseCount(batchSize.min, batchSize.max),
      ),
      pollInterval: yield* durationSetting("consumer.poll_interval"),
      cooldown: yield* durationSetting("consumer.cooldown"),
      pendingAlertAfter: yield* durationSetting("consumer.pending_alert_after"),
    },
    sync: { eventRetention: yield* durationSetting("sync.event_retention") },
    log: { sequencing: yield* setting("log.sequencing", defaults["log.sequencing"], parseOneOf(logSequencings)) },
    jobs: { lease: yield* durationSetting("jobs.lease") },
  }
  return yield* check(settings)
})

export class BothyConfig extends Context.Service<BothyConfig, Settings>()("bothy/BothyConfig") {
  /** Settings from the environment, validated. */
  static readonly layer = Layer.effect(BothyConfig, load)
  /** Settings a host app gives directly; the same bounds and cross-key checks apply. */
  static readonly layerWith = (settings: Settings) => Layer.effect(BothyConfig, check(settings))
  /** The environment with empty values kept (`environment`), for a host app that reads bothy's settings. */
  static readonly environment = environment
}
