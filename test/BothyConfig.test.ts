import { assert, describe, it } from "@effect/vitest"
import { ConfigProvider, Duration, Effect } from "effect"
import { InvalidConfig, load } from "../src/BothyConfig.ts"

const loadWith = (env: Record<string, string>) =>
  load.pipe(Effect.provide(ConfigProvider.layer(ConfigProvider.fromEnv({ env }))))

describe("BothyConfig", () => {
  it.effect("defaults are the documented ones", () =>
    Effect.gen(function* () {
      const settings = yield* loadWith({})
      assert.strictEqual(settings.consumer.batchSize, 500)
      assert.strictEqual(Duration.toMillis(settings.consumer.pollInterval), 1000)
      assert.strictEqual(Duration.toMillis(settings.consumer.cooldown), 50)
      assert.strictEqual(Duration.toMillis(settings.consumer.pendingAlertAfter), 3_600_000)
      assert.strictEqual(Duration.toMillis(settings.sync.eventRetention), 7 * 86_400_000)
      assert.strictEqual(Duration.toMillis(settings.perf.pushHandoffP95), 50)
    }),
  )

  it.effect("reads BOTHY_ variables in short and long duration forms", () =>
    Effect.gen(function* () {
      const settings = yield* loadWith({
        BOTHY_CONSUMER_BATCH_SIZE: "1000",
        BOTHY_CONSUMER_POLL_INTERVAL: "250ms",
        BOTHY_CONSUMER_COOLDOWN: "0s",
        BOTHY_CONSUMER_PENDING_ALERT_AFTER: "2 hours",
        BOTHY_SYNC_EVENT_RETENTION: "14d",
      })
      assert.strictEqual(settings.consumer.batchSize, 1000)
      assert.strictEqual(Duration.toMillis(settings.consumer.pollInterval), 250)
      assert.strictEqual(Duration.toMillis(settings.consumer.cooldown), 0, "0 turns the cooldown off")
      assert.strictEqual(Duration.toMillis(settings.consumer.pendingAlertAfter), 7_200_000)
      assert.strictEqual(Duration.toMillis(settings.sync.eventRetention), 14 * 86_400_000)
    }),
  )

  it.effect("ConfigRejectsAlertAfterNotBelowRetention: equal or above is refused, naming both keys", () =>
    Effect.gen(function* () {
      for (const alert of ["7d", "8d"]) {
        const error = yield* loadWith({ BOTHY_CONSUMER_PENDING_ALERT_AFTER: alert }).pipe(Effect.flip)
        assert.instanceOf(error, InvalidConfig)
        assert.deepStrictEqual(error.keys, ["consumer.pending_alert_after", "sync.event_retention"])
        assert.include(error.message, "consumer.pending_alert_after")
        assert.include(error.message, "sync.event_retention")
        assert.include(error.message, "strictly below")
        assert.notInclude(error.message, "\n", "one line")
      }
      // Just below is fine.
      yield* loadWith({ BOTHY_CONSUMER_PENDING_ALERT_AFTER: "6d", BOTHY_SYNC_EVENT_RETENTION: "7d" })
    }),
  )

  it.effect("a bad value is one line naming the key and its variable", () =>
    Effect.gen(function* () {
      const cases: ReadonlyArray<readonly [string, string, string]> = [
        ["BOTHY_CONSUMER_BATCH_SIZE", "abc", "consumer.batch_size"],
        ["BOTHY_CONSUMER_BATCH_SIZE", "0", "consumer.batch_size"],
        ["BOTHY_CONSUMER_BATCH_SIZE", "1.5", "consumer.batch_size"],
        ["BOTHY_CONSUMER_POLL_INTERVAL", "soon", "consumer.poll_interval"],
        ["BOTHY_CONSUMER_POLL_INTERVAL", "0s", "consumer.poll_interval"],
        ["BOTHY_CONSUMER_COOLDOWN", "-5ms", "consumer.cooldown"],
        ["BOTHY_CONSUMER_COOLDOWN", "brief", "consumer.cooldown"],
        ["BOTHY_SYNC_EVENT_RETENTION", "-1d", "sync.event_retention"],
        ["BOTHY_PERF_PUSH_HANDOFF_P95", "fast", "perf.push_handoff_p95"],
      ]
      for (const [name, value, key] of cases) {
        const error = yield* loadWith({ [name]: value }).pipe(Effect.flip)
        assert.deepStrictEqual(error.keys, [key], `${name}=${value}`)
        assert.include(error.message, name)
        assert.include(error.message, key)
        assert.include(error.message, JSON.stringify(value))
        assert.notInclude(error.message, "\n")
      }
    }),
  )
})
