import { randomBytes } from "node:crypto"
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { ConfigProvider, Duration, Effect, Layer, Redacted } from "effect"
import * as SecretBox from "../../src/crypto/SecretBox.ts"
import { BothyConfig, type durationBounds, InvalidConfig, load, type Settings } from "../../src/platform/BothyConfig.ts"
import * as Database from "../../src/platform/Database.ts"
import * as WebhookConfig from "../../src/webhooks/WebhookConfig.ts"

// As the `bothy` command reads the environment: empty values kept, so they can be refused.
const withEnv = (env: Record<string, string>) =>
  Effect.provide(ConfigProvider.layer(ConfigProvider.fromEnv({ env, preserveEmptyStrings: true })))
const loadWith = (env: Record<string, string>) => load.pipe(withEnv(env))

const tempFolder = Effect.acquireRelease(
  Effect.sync(() => mkdtempSync(join(tmpdir(), "bothy-config-"))),
  (dir) => Effect.sync(() => rmSync(dir, { recursive: true, force: true })),
)

describe("BothyConfig", () => {
  it.effect("defaults are the documented ones", () =>
    Effect.gen(function* () {
      const settings = yield* loadWith({})
      assert.strictEqual(settings.consumer.batchSize, 500)
      assert.strictEqual(Duration.toMillis(settings.consumer.pollInterval), 1000)
      assert.strictEqual(Duration.toMillis(settings.consumer.cooldown), 50)
      assert.strictEqual(Duration.toMillis(settings.consumer.pendingAlertAfter), 3_600_000)
      assert.strictEqual(Duration.toMillis(settings.sync.eventRetention), 7 * 86_400_000)
      assert.strictEqual(settings.log?.sequencing, "counter")
      assert.strictEqual(Duration.toMillis(settings.jobs!.lease), 10_000)
    }),
  )

  it.effect(
    "JobsLeaseSetting: BOTHY_JOBS_LEASE sets the lease; a value out of bounds is an InvalidConfig naming it",
    () =>
      Effect.gen(function* () {
        assert.strictEqual(Duration.toMillis((yield* loadWith({ BOTHY_JOBS_LEASE: "30s" })).jobs!.lease), 30_000)
        for (const bad of ["1s", "11m", "ten seconds"]) {
          const error = yield* loadWith({ BOTHY_JOBS_LEASE: bad }).pipe(Effect.flip)
          assert.instanceOf(error, InvalidConfig)
          assert.deepStrictEqual(error.keys, ["jobs.lease"])
          assert.include(error.message, "BOTHY_JOBS_LEASE (jobs.lease)")
        }
        const host: Settings = {
          consumer: {
            batchSize: 500,
            pollInterval: Duration.seconds(1),
            cooldown: Duration.millis(50),
            pendingAlertAfter: Duration.hours(1),
          },
          sync: { eventRetention: Duration.days(7) },
          jobs: { lease: Duration.seconds(1) },
        }
        const error = yield* Layer.build(BothyConfig.layerWith(host)).pipe(Effect.scoped, Effect.flip)
        assert.deepStrictEqual(error.keys, ["jobs.lease"])
      }),
  )

  it.effect("the push benchmark's BOTHY_PERF_PUSH_HANDOFF_P95 is not bothy's: a deploy that still sets it starts", () =>
    Effect.gen(function* () {
      yield* loadWith({ BOTHY_PERF_PUSH_HANDOFF_P95: "not a duration" })
    }),
  )

  it.effect("log.sequencing takes counter or post_commit", () =>
    Effect.gen(function* () {
      assert.strictEqual((yield* loadWith({ BOTHY_LOG_SEQUENCING: "post_commit" })).log?.sequencing, "post_commit")
      assert.strictEqual((yield* loadWith({ BOTHY_LOG_SEQUENCING: "counter" })).log?.sequencing, "counter")
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
        ["BOTHY_LOG_SEQUENCING", "postcommit", "log.sequencing"],
        ["BOTHY_LOG_SEQUENCING", "Counter", "log.sequencing"],
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

  it.effect(
    "EmptyVariableIsAnError: every BOTHY_ setting set but empty or blank is one line naming it, never the default",
    () =>
      Effect.gen(function* () {
        const names = [
          "BOTHY_CONSUMER_BATCH_SIZE",
          "BOTHY_CONSUMER_POLL_INTERVAL",
          "BOTHY_CONSUMER_COOLDOWN",
          "BOTHY_CONSUMER_PENDING_ALERT_AFTER",
          "BOTHY_SYNC_EVENT_RETENTION",
          "BOTHY_LOG_SEQUENCING",
        ]
        for (const name of names) {
          for (const value of ["", " ", "\t"]) {
            const error = yield* loadWith({ [name]: value }).pipe(Effect.flip)
            assert.instanceOf(error, InvalidConfig)
            assert.include(error.message, `${name} (`, name)
            assert.include(error.message, "is set but empty", name)
            assert.notInclude(error.message, "\n")
          }
        }
        const home = yield* Database.home.pipe(withEnv({ BOTHY_HOME: "" }), Effect.flip)
        assert.deepStrictEqual(home.keys, ["home"])
        assert.include(home.message, "BOTHY_HOME")
      }),
  )

  it.effect("EmptyVariableIsAnError: DATABASE_URL set but empty is refused, not read as 'run an embedded server'", () =>
    Effect.gen(function* () {
      const error = yield* Database.external.pipe(withEnv({ DATABASE_URL: "" }), Effect.flip)
      assert.deepStrictEqual(error.keys, ["DATABASE_URL"])
      assert.strictEqual(
        error.message,
        "invalid configuration: DATABASE_URL is set but empty; unset it to run an embedded PostgreSQL, or give a value",
      )
      assert.isFalse(yield* Database.external.pipe(withEnv({})), "unset: embedded")
      assert.isTrue(yield* Database.external.pipe(withEnv({ DATABASE_URL: "postgres://h/db" })))
    }),
  )

  it.effect(
    "EmptyVariableIsAnError: BOTHY_WEBHOOK_SECRET_KEY set but empty is refused, and the embedded key file is not used instead",
    () =>
      Effect.gen(function* () {
        const variable = "BOTHY_WEBHOOK_SECRET_KEY"
        const loaded = yield* SecretBox.loadKey.pipe(withEnv({ [variable]: "" }), Effect.flip)
        assert.deepStrictEqual(loaded.keys, ["webhook.secret_key"])
        assert.include(loaded.message, `${variable} (webhook.secret_key) is set but empty`)
        const file = join(yield* tempFolder, "webhook-secret-key")
        const fromFile = yield* WebhookConfig.keyOrFile(file).pipe(withEnv({ [variable]: " " }), Effect.flip)
        assert.include(fromFile.message, "is set but empty")
        assert.isFalse(existsSync(file), "no key file written")
        // Unset, the embedded server's file is created (0600) and used.
        const key = yield* WebhookConfig.keyOrFile(file).pipe(withEnv({}))
        assert.strictEqual(statSync(file).mode & 0o777, 0o600)
        assert.strictEqual(key.id, (yield* WebhookConfig.keyOrFile(file).pipe(withEnv({}))).id)
      }).pipe(Effect.scoped),
  )

  it.effect("a key file that group or others may read or write is refused, naming the file and the fix", () =>
    Effect.gen(function* () {
      const file = join(yield* tempFolder, "webhook-secret-key")
      const raw = `${randomBytes(32).toString("base64")}\n`
      for (const mode of [0o644, 0o640, 0o604, 0o620, 0o602]) {
        writeFileSync(file, raw)
        chmodSync(file, mode)
        const error = yield* WebhookConfig.keyOrFile(file).pipe(withEnv({}), Effect.flip)
        assert.deepStrictEqual(error.keys, ["webhook.secret_key"])
        assert.include(error.message, file)
        assert.include(error.message, `mode 0${mode.toString(8)}`)
        assert.include(error.message, "chmod 600")
        assert.strictEqual(readFileSync(file, "utf8"), raw, "left as it was")
      }
      chmodSync(file, 0o400)
      yield* WebhookConfig.keyOrFile(file).pipe(withEnv({}))
    }).pipe(Effect.scoped),
  )

  it.effect(
    "DegradedSettingsValidated: the failure rate, window and minimum of attempts are read as given and refused out of bounds, naming the key",
    () =>
      Effect.gen(function* () {
        const key = yield* SecretBox.parseKey(Redacted.make(Buffer.alloc(32, 7).toString("base64")))
        const webhooks = (env: Record<string, string>) => WebhookConfig.load(Effect.succeed(key)).pipe(withEnv(env))
        const health = (h: WebhookConfig.WebhookSettings["health"]) =>
          h === undefined ? undefined : { ...h, window: Duration.toMillis(h.window) }
        assert.deepStrictEqual(health((yield* webhooks({})).health), {
          failureRate: 0.5,
          window: 15 * 60_000,
          minAttempts: 10,
        })
        const given = yield* webhooks({
          BOTHY_WEBHOOK_DEGRADED_FAILURE_RATE: "25%",
          BOTHY_WEBHOOK_DEGRADED_WINDOW: "1h",
          BOTHY_WEBHOOK_DEGRADED_MIN_ATTEMPTS: "3",
        })
        assert.deepStrictEqual(health(given.health), { failureRate: 0.25, window: 3_600_000, minAttempts: 3 })
        for (const [name, value, configKey] of [
          ["BOTHY_WEBHOOK_DEGRADED_FAILURE_RATE", "1", "webhook.degraded_failure_rate"],
          ["BOTHY_WEBHOOK_DEGRADED_FAILURE_RATE", "0%", "webhook.degraded_failure_rate"],
          ["BOTHY_WEBHOOK_DEGRADED_FAILURE_RATE", "half", "webhook.degraded_failure_rate"],
          ["BOTHY_WEBHOOK_DEGRADED_WINDOW", "59s", "webhook.degraded_window"],
          ["BOTHY_WEBHOOK_DEGRADED_WINDOW", "2d", "webhook.degraded_window"],
          ["BOTHY_WEBHOOK_DEGRADED_MIN_ATTEMPTS", "0", "webhook.degraded_min_attempts"],
        ] as const) {
          const error = yield* webhooks({ [name]: value }).pipe(Effect.flip)
          assert.instanceOf(error, InvalidConfig)
          assert.deepStrictEqual(error.keys, [configKey], `${name}=${value}`)
          assert.include(error.message, name)
          assert.notInclude(error.message, "\n")
        }
      }),
  )

  it.effect("every duration setting has bounds: each edge is accepted, one step past it refused naming the key", () =>
    Effect.gen(function* () {
      const edges: ReadonlyArray<readonly [keyof typeof durationBounds, string, string, string, string]> = [
        ["consumer.poll_interval", "10ms", "10m", "9ms", "601s"],
        ["consumer.cooldown", "0s", "10s", "-", "10001ms"],
        ["consumer.pending_alert_after", "1m", "30d", "59s", "721h"],
        ["sync.event_retention", "1d", "3650d", "23h", "3651d"],
        ["jobs.lease", "3s", "10m", "2999ms", "601s"],
      ]
      // The other keys set so that each edge passes the cross-key rules.
      const around: Record<string, string> = {
        BOTHY_CONSUMER_POLL_INTERVAL: "11s",
        BOTHY_CONSUMER_PENDING_ALERT_AFTER: "2m",
        BOTHY_SYNC_EVENT_RETENTION: "31d",
      }
      for (const [key, min, max, below, above] of edges) {
        const name = `BOTHY_${key.replaceAll(".", "_").toUpperCase()}`
        for (const edge of [min, max]) {
          const env = { ...around, [name]: edge }
          if (key === "consumer.poll_interval") env.BOTHY_CONSUMER_COOLDOWN = "0s"
          if (key === "sync.event_retention") env.BOTHY_CONSUMER_PENDING_ALERT_AFTER = "1m"
          yield* loadWith(env)
        }
        for (const past of [below, above].filter((v) => v !== "-")) {
          const error = yield* loadWith({ ...around, [name]: past }).pipe(Effect.flip)
          assert.deepStrictEqual(error.keys, [key], `${name}=${past}: ${error.message}`)
          assert.include(error.message, "expected a duration from")
        }
      }
    }),
  )

  it.effect(
    "ConfigRejectsCooldownNotBelowPollInterval: equal or above is refused naming both keys; a host's settings too",
    () =>
      Effect.gen(function* () {
        for (const cooldown of ["1s", "2s"]) {
          const error = yield* loadWith({ BOTHY_CONSUMER_COOLDOWN: cooldown, BOTHY_CONSUMER_POLL_INTERVAL: "1s" }).pipe(
            Effect.flip,
          )
          assert.deepStrictEqual(error.keys, ["consumer.cooldown", "consumer.poll_interval"])
          assert.include(error.message, "strictly below")
        }
        yield* loadWith({ BOTHY_CONSUMER_COOLDOWN: "999ms", BOTHY_CONSUMER_POLL_INTERVAL: "1s" })
        const host: Settings = {
          consumer: {
            batchSize: 500,
            pollInterval: Duration.millis(100),
            cooldown: Duration.millis(100),
            pendingAlertAfter: Duration.hours(1),
          },
          sync: { eventRetention: Duration.days(7) },
        }
        const error = yield* Layer.build(BothyConfig.layerWith(host)).pipe(Effect.scoped, Effect.flip)
        assert.deepStrictEqual(error.keys, ["consumer.cooldown", "consumer.poll_interval"])
      }),
  )
})
