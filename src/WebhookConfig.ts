/**
 * Settings of outgoing webhooks, validated at start: the key that seals signing secrets at rest,
 * which targets are allowed, and the rule that a failing endpoint is disabled before its events
 * can leave the log.
 */
import { randomBytes } from "node:crypto"
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs"
import { dirname } from "node:path"
import { Context, Duration, Effect, Layer, Redacted, Result } from "effect"
import { BothyConfig, envName, InvalidConfig, parseCount, parseDuration, setting } from "./BothyConfig.ts"
import * as SecretBox from "./SecretBox.ts"
import * as WebhookSchedule from "./WebhookSchedule.ts"
import type { TargetPolicy } from "./WebhookTarget.ts"

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
}

/** The delivery settings' defaults, as the worker applies them when a host gives none. */
export const deliveryDefaults = {
  maxInFlight: 256,
  maxInFlightPerOwner: 32,
  permissionMaxAge: Duration.seconds(1),
} as const

const list = (raw: string) =>
  Result.succeed(
    raw
      .split(",")
      .map((s) => s.trim())
      .filter((s) => s.length > 0),
  )

const flag = (raw: string) =>
  /^(true|1|yes)$/i.test(raw.trim())
    ? Result.succeed(true)
    : /^(false|0|no)$/i.test(raw.trim())
      ? Result.succeed(false)
      : Result.fail("expected true or false")

// At least 100 ms: a right read just before its request must not count as old on a busy database,
// or every read-ahead is read again; at most a minute, or "checked at delivery time" means little.
const permissionAge = (raw: string) =>
  Result.flatMap(parseDuration(raw), (d) =>
    Duration.isLessThan(d, Duration.millis(100)) || Duration.isGreaterThan(d, Duration.minutes(1))
      ? Result.fail("expected a duration from 100ms to 1m")
      : Result.succeed(d),
  )

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
 * beside that file anyway.
 */
export const keyOrFile = (file: string) =>
  Effect.gen(function* () {
    if (process.env[SecretBox.keyVariable] !== undefined) return yield* SecretBox.loadKey
    const raw = yield* Effect.try({
      try: () => {
        if (!existsSync(file)) {
          mkdirSync(dirname(file), { recursive: true })
          writeFileSync(file, `${randomBytes(32).toString("base64")}\n`, { mode: 0o600 })
        }
        return readFileSync(file, "utf8")
      },
      catch: (e) =>
        new InvalidConfig({ keys: [SecretBox.keyName], detail: `cannot use the key file ${file}: ${String(e)}` }),
    })
    return yield* SecretBox.parseKey(Redacted.make(raw)).pipe(
      Effect.mapError((e) => new InvalidConfig({ keys: [SecretBox.keyName], detail: `${file}: ${e.message}` })),
    )
  })

export const load = (secretKey: Effect.Effect<SecretBox.SecretKey, InvalidConfig> = SecretBox.loadKey) =>
  Effect.gen(function* () {
    const key = yield* secretKey
    const policy: TargetPolicy = {
      allowHttpLoopback: yield* setting("webhook.allow_http_loopback", "false", flag),
      allowCidrs: yield* setting("webhook.allow_cidrs", "", list),
      allowHosts: yield* setting("webhook.allow_hosts", "", list),
    }
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
    return { secretKey: key, policy, maxInFlight, maxInFlightPerOwner, permissionMaxAge } satisfies WebhookSettings
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
  static readonly layerWith = (settings: WebhookSettings) => Layer.succeed(WebhookConfig)(settings)
}
