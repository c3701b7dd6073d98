import { assert, describe, it } from "@effect/vitest"
import { ConfigProvider, Duration, Effect } from "effect"
import * as WebhookConfig from "../../src/webhooks/WebhookConfig.ts"
import * as TestWebhooks from "../support/TestWebhooks.ts"

const loadWith = (env: Record<string, string>) =>
  WebhookConfig.load(Effect.succeed(TestWebhooks.secretKey())).pipe(
    Effect.provide(ConfigProvider.layer(ConfigProvider.fromEnv({ env }))),
  )

describe("Webhook delivery settings", () => {
  it.effect("WebhookInFlightSettings: the defaults are the documented ones, and the variables are read", () =>
    Effect.gen(function* () {
      const defaults = yield* loadWith({})
      assert.deepStrictEqual(
        [defaults.maxInFlight, defaults.maxInFlightPerOwner, Duration.toMillis(defaults.permissionMaxAge!)],
        [256, 32, 1000],
      )
      const set = yield* loadWith({
        BOTHY_WEBHOOK_MAX_IN_FLIGHT: "500",
        BOTHY_WEBHOOK_OWNER_MAX_IN_FLIGHT: "500",
        BOTHY_WEBHOOK_PERMISSION_MAX_AGE: "250ms",
      })
      assert.deepStrictEqual(
        [set.maxInFlight, set.maxInFlightPerOwner, Duration.toMillis(set.permissionMaxAge!)],
        [500, 500, 250],
      )
    }),
  )

  it.effect("WebhookInFlightSettingsRefused: a bad value is one line naming the key and its variable", () =>
    Effect.gen(function* () {
      const cases: ReadonlyArray<readonly [string, string, string]> = [
        ["BOTHY_WEBHOOK_MAX_IN_FLIGHT", "0", "webhook.max_in_flight"],
        ["BOTHY_WEBHOOK_MAX_IN_FLIGHT", "many", "webhook.max_in_flight"],
        ["BOTHY_WEBHOOK_MAX_IN_FLIGHT", "10001", "webhook.max_in_flight"],
        ["BOTHY_WEBHOOK_OWNER_MAX_IN_FLIGHT", "0", "webhook.owner_max_in_flight"],
        ["BOTHY_WEBHOOK_PERMISSION_MAX_AGE", "50ms", "webhook.permission_max_age"],
        ["BOTHY_WEBHOOK_PERMISSION_MAX_AGE", "2m", "webhook.permission_max_age"],
        ["BOTHY_WEBHOOK_PERMISSION_MAX_AGE", "soon", "webhook.permission_max_age"],
      ]
      for (const [name, value, key] of cases) {
        const error = yield* loadWith({ [name]: value }).pipe(Effect.flip)
        assert.deepStrictEqual(error.keys, [key], `${name}=${value}`)
        assert.include(error.message, name)
        assert.include(error.message, JSON.stringify(value))
        assert.notInclude(error.message, "\n")
      }
      const above = yield* loadWith({
        BOTHY_WEBHOOK_MAX_IN_FLIGHT: "16",
        BOTHY_WEBHOOK_OWNER_MAX_IN_FLIGHT: "17",
      }).pipe(Effect.flip)
      assert.deepStrictEqual(above.keys, ["webhook.owner_max_in_flight", "webhook.max_in_flight"])
      assert.include(above.message, "BOTHY_WEBHOOK_OWNER_MAX_IN_FLIGHT")
      assert.include(above.message, "BOTHY_WEBHOOK_MAX_IN_FLIGHT ")
    }),
  )
})
