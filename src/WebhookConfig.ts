/**
 * Settings of outgoing webhooks, validated at start: the key that seals signing secrets at rest,
 * which targets are allowed, and the rule that a failing endpoint is disabled before its events
 * can leave the log.
 */
import { randomBytes } from "node:crypto"
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs"
import { dirname } from "node:path"
import { Context, Duration, Effect, Layer, Redacted, Result } from "effect"
import { BothyConfig, envName, InvalidConfig, setting } from "./BothyConfig.ts"
import * as SecretBox from "./SecretBox.ts"
import * as WebhookSchedule from "./WebhookSchedule.ts"
import type { TargetPolicy } from "./WebhookTarget.ts"

export interface WebhookSettings {
  readonly secretKey: SecretBox.SecretKey
  readonly policy: TargetPolicy
  /** Retry steps after failures; the last repeats. Default `WebhookSchedule.steps`. */
  readonly retrySteps?: ReadonlyArray<Duration.Duration>
}

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
    return { secretKey: key, policy } satisfies WebhookSettings
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
