/**
 * Settings of outgoing webhooks, validated at start: the key that seals signing secrets at rest,
 * which targets are allowed, and the rule that a failing endpoint is disabled before its events
 * can leave the log.
 */
import { Context, Duration, Effect, Layer, Result } from "effect"
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

export const load = Effect.gen(function* () {
  const secretKey = yield* SecretBox.loadKey
  const policy: TargetPolicy = {
    allowHttpLoopback: yield* setting("webhook.allow_http_loopback", "false", flag),
    allowCidrs: yield* setting("webhook.allow_cidrs", "", list),
    allowHosts: yield* setting("webhook.allow_hosts", "", list),
  }
  return { secretKey, policy } satisfies WebhookSettings
})

export class WebhookConfig extends Context.Service<WebhookConfig, WebhookSettings>()("bothy/WebhookConfig") {
  /** From the environment; also checks the retention rule against `BothyConfig`. */
  static readonly layer = Layer.effect(
    WebhookConfig,
    Effect.gen(function* () {
      const settings = yield* BothyConfig
      yield* checkRetention(settings.sync.eventRetention)
      return yield* load
    }),
  )
  static readonly layerWith = (settings: WebhookSettings) => Layer.succeed(WebhookConfig)(settings)
}
