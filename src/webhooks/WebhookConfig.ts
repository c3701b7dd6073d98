/**
 * Settings of outgoing webhooks, validated at start: the key that seals signing secrets at rest,
 * which targets are allowed, and the rule that a failing endpoint is disabled before its events
 * can leave the log.
 */
import { randomBytes } from "node:crypto"
import { existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from "node:fs"
import { dirname } from "node:path"
import { Context, Duration, Effect, Layer, Option, Redacted, Result } from "effect"
import * as SecretBox from "../crypto/SecretBox.ts"
import type { TargetPolicy } from "../outbound/OutboundTarget.ts"
import * as TargetPolicyConfig from "../outbound/TargetPolicyConfig.ts"
import {
  BothyConfig,
  envName,
  InvalidConfig,
  parseCount,
  parseDurationWithin,
  parseFlag,
  setting,
} from "../platform/BothyConfig.ts"
import * as WebhookSchedule from "./drain/WebhookSchedule.ts"
import { type HealthSettings, healthDefaults } from "./subscriptions/SubscriptionHealth.ts"

export interface WebhookSettings {
  readonly secretKey: SecretBox.SecretKey
  readonly policy: TargetPolicy
  /** Retry steps after failures; the last repeats. Default `WebhookSchedule.steps`. */
  readonly retrySteps?: ReadonlyArray<Duration.Duration>
  /** Drain runs a worker has in flight at once (its `webhooks` queue's concurrency). Default 256. */
  readonly maxInFlight?: number
  /** Of those, at most this many for the subscriptions of one owner. Default 32. */
  readonly maxInFlightPerOwner?: number
  /** A delivery whose right and scope were read longer before its request is checked again first. Default 1 s. */
  readonly permissionMaxAge?: Duration.Duration
  /** Finished deliveries older than this are removed (`DeliveryHistory`). Default: `sync.event_retention`. */
  readonly historyRetention?: Duration.Duration
  /**
   * Send the W3C `traceparent` header (the delivery attempt's span, in the event's trace), so a
   * receiver can join the trace. Default false: it tells the receiver the installation's trace ids.
   */
  readonly traceparent?: boolean
  /**
   * When a subscription is degraded: failure rate, window, minimum attempts
   * (`webhook.degraded_failure_rate`, `webhook.degraded_window`, `webhook.degraded_min_attempts`).
   * Default `SubscriptionHealth.healthDefaults`: above 50 % over 15 minutes, at least 10 attempts.
   */
  readonly health?: HealthSettings
}

/** The delivery settings' defaults, as the worker applies them when a host gives none. */
export const deliveryDefaults = {
  maxInFlight: 256,
  maxInFlightPerOwner: 32,
  permissionMaxAge: Duration.seconds(1),
} as const

// At least 100 ms: a right read just before its request must not count as old on a busy database,
// or every read-ahead is read again; at most a minute, or "checked at delivery time" means little.
const permissionAge = parseDurationWithin({ min: Duration.millis(100), max: Duration.minutes(1) })

// At least an hour, so a delivery is there to look at after it finished; at most ten years.
const historyAge = parseDurationWithin({ min: Duration.hours(1), max: Duration.days(3650) })

// At least a minute (fewer attempts than that say little), at most a day (the counts are two buckets of it).
const healthWindow = parseDurationWithin({ min: Duration.minutes(1), max: Duration.days(1) })

/** A failure rate strictly between 0 and 1, as a fraction (`0.5`) or a percentage (`50%`). */
const failureRate = (raw: string): Result.Result<number, string> => {
  const text = raw.trim()
  const percent = text.endsWith("%")
  const value = Number(percent ? text.slice(0, -1) : text)
  const rate = percent ? value / 100 : value
  return text !== "" && Number.isFinite(rate) && rate > 0 && rate < 1
    ? Result.succeed(rate)
    : Result.fail("must be a rate strictly between 0 and 1, such as 0.5 or 50%")
}

/** The disable window plus the longest retry step must be below the log's retention. */
export const checkRetention = (eventRetention: Duration.Duration) =>
  Duration.isLessThan(WebhookSchedule.longestFailingSpan, eventRetention)
    ? Effect.void
    : Effect.fail(
        new InvalidConfig({
          keys: ["sync.event_retention"],
          detail: `sync.event_retention (${envName("sync.event_retention")} = ${Duration.format(eventRetention)}) must be above the webhook disable window plus the longest retry step (${Duration.format(WebhookSchedule.longestFailingSpan)}), or a failing endpoint's events would leave the log before it is disabled`,
        }),
      )

/**
 * The sealing key from `BOTHY_WEBHOOK_SECRET_KEY`; without it, from `file`, created with a fresh
 * random key (mode 0600) when missing. Only for the embedded development server, whose data lives
 * beside that file anyway. A key file that group or others may read or write is refused: whoever
 * reads it can open every signing secret in a dump.
 */
export const keyOrFile = (file: string) =>
  Effect.gen(function* () {
    if (Option.isSome(yield* SecretBox.keySetting)) return yield* SecretBox.loadKey
    const refuse = (why: string) =>
      new InvalidConfig({ keys: [SecretBox.keyName], detail: `the key file ${file} ${why}` })
    const raw = yield* Effect.try({
      try: () => {
        if (!existsSync(file)) {
          mkdirSync(dirname(file), { recursive: true })
          writeFileSync(file, `${randomBytes(32).toString("base64")}\n`, { mode: 0o600 })
        }
        return { text: readFileSync(file, "utf8"), mode: statSync(file).mode & 0o777 }
      },
      catch: (e) => refuse(`cannot be used: ${String(e)}`),
    })
    if ((raw.mode & 0o077) !== 0) {
      return yield* refuse(
        `is open to other users (mode ${raw.mode.toString(8).padStart(4, "0")}); run chmod 600 ${file}, or give ${SecretBox.keyVariable}`,
      )
    }
    return yield* SecretBox.parseKey(Redacted.make(raw.text)).pipe(
      Effect.mapError((e) => new InvalidConfig({ keys: [SecretBox.keyName], detail: `${file}: ${e.message}` })),
    )
  })

/** See `TargetPolicyConfig.check`. */
export const checkPolicy = TargetPolicyConfig.check

export const load = (secretKey: Effect.Effect<SecretBox.SecretKey, InvalidConfig> = SecretBox.loadKey) =>
  Effect.gen(function* () {
    const key = yield* secretKey
    const policy = yield* TargetPolicyConfig.load
    const maxInFlight = yield* setting(
      "webhook.max_in_flight",
      String(deliveryDefaults.maxInFlight),
      parseCount(1, 10_000),
    )
    const maxInFlightPerOwner = yield* setting(
      "webhook.owner_max_in_flight",
      String(deliveryDefaults.maxInFlightPerOwner),
      parseCount(1, 10_000),
    )
    if (maxInFlightPerOwner > maxInFlight) {
      return yield* new InvalidConfig({
        keys: ["webhook.owner_max_in_flight", "webhook.max_in_flight"],
        detail: `webhook.owner_max_in_flight (${envName("webhook.owner_max_in_flight")} = ${maxInFlightPerOwner}) must not be above webhook.max_in_flight (${envName("webhook.max_in_flight")} = ${maxInFlight})`,
      })
    }
    const permissionMaxAge = yield* setting("webhook.permission_max_age", "1s", permissionAge)
    const historyRetention = yield* setting("webhook.history_retention", "", (raw) =>
      raw.trim() === "" ? Result.succeed(undefined) : historyAge(raw),
    )
    const traceparent = yield* setting("webhook.traceparent", "false", parseFlag)
    const health = {
      failureRate: yield* setting("webhook.degraded_failure_rate", String(healthDefaults.failureRate), failureRate),
      window: yield* setting("webhook.degraded_window", "15m", healthWindow),
      minAttempts: yield* setting(
        "webhook.degraded_min_attempts",
        String(healthDefaults.minAttempts),
        parseCount(1, 1_000_000),
      ),
    } satisfies HealthSettings
    return {
      secretKey: key,
      policy,
      maxInFlight,
      maxInFlightPerOwner,
      permissionMaxAge,
      ...(historyRetention === undefined ? {} : { historyRetention }),
      traceparent,
      health,
    } satisfies WebhookSettings
  })

export class WebhookConfig extends Context.Service<WebhookConfig, WebhookSettings>()("bothy/WebhookConfig") {
  /** From the environment (or `secretKey`); also checks the retention rule against `BothyConfig`. */
  static readonly layer = (secretKey?: Effect.Effect<SecretBox.SecretKey, InvalidConfig>) =>
    Layer.effect(
      WebhookConfig,
      Effect.gen(function* () {
        const settings = yield* BothyConfig
        yield* checkRetention(settings.sync.eventRetention)
        return yield* load(secretKey)
      }),
    )
  /** Settings a host app gives directly; the allow-lists are checked as from the environment. */
  static readonly layerWith = (settings: WebhookSettings) =>
    Layer.effect(
      WebhookConfig,
      Effect.map(checkPolicy(settings.policy), () => settings),
    )
}
