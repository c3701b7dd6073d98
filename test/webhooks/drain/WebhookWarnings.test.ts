import { assert, layer } from "@effect/vitest"
import { Duration, Effect, Logger } from "effect"
import { SqlClient } from "effect/sql"
import { TestClock } from "effect/testing"
import * as SecretBox from "../../../src/crypto/SecretBox.ts"
import { EventLog } from "../../../src/log/EventLog.ts"
import * as WebhookDrainer from "../../../src/webhooks/drain/WebhookDrainer.ts"
import * as WebhookSecret from "../../../src/webhooks/subscriptions/WebhookSecret.ts"
import { WebhookConfig } from "../../../src/webhooks/WebhookConfig.ts"
import * as WebhookReceiver from "../../../testkit/WebhookReceiver.ts"
import * as TestWebhooks from "../../support/TestWebhooks.ts"

const Live = TestWebhooks.layer()

layer(Live, { excludeTestServices: true })("Webhook warnings", (it) => {
  it.effect(
    "WebhookRefusalWarnsOncePerMinute: a refused target and a redirect are warnings, at most once per subscription a minute by the Clock",
    () =>
      Effect.gen(function* () {
        yield* TestClock.setTime(Date.now())
        const config = yield* WebhookConfig
        const warnings: Array<string> = []
        const capture = Logger.make(({ logLevel, message }) => {
          const text = Array.isArray(message) ? message.join(" ") : String(message)
          // The one line a subscription's first failure gets is SubscriptionFailingIsLogged's.
          if (logLevel === "Warn" && !text.includes(": started failing,")) warnings.push(text)
        })
        const redirecting = yield* WebhookReceiver.start(() => ({
          status: 302,
          headers: { location: "http://10.0.0.1/" },
        }))
        // Created while plain http to loopback is allowed; the drainer's policy refuses it.
        const refused = yield* TestWebhooks.subscribe("owner-w", redirecting.url("/refused"), ["warn-a"])
        const redirected = yield* TestWebhooks.subscribe("owner-w", redirecting.url("/redirect"), ["warn-b"])
        for (const space of ["warn-a", "warn-b"]) {
          yield* (yield* EventLog).append([{ space, type: "item.created", actor: "a", payload: {} }])
        }
        yield* TestWebhooks.round()
        const kind = yield* WebhookDrainer.makeWith({ linger: 0 })
        const strict = yield* WebhookDrainer.makeWith({ linger: 0 }).pipe(
          Effect.provideService(WebhookConfig, {
            ...config,
            policy: { allowHttpLoopback: false, allowCidrs: [], allowHosts: [] },
          }),
        )
        const refusedJob = yield* TestWebhooks.drainJob(refused.id)
        const redirectedJob = yield* TestWebhooks.drainJob(redirected.id)
        // One attempt of each, as the job runtime would run them; each snoozes for its retry.
        const attempts = Effect.gen(function* () {
          yield* strict
            .run({ subscription: refused.id }, refusedJob)
            .pipe(Effect.catchTag("JobSnooze", () => Effect.void))
          yield* kind
            .run({ subscription: redirected.id }, redirectedJob)
            .pipe(Effect.catchTag("JobSnooze", () => Effect.void))
        }).pipe(Effect.provide(Logger.layer([capture])))

        yield* attempts
        assert.strictEqual(warnings.length, 2, warnings.join("\n"))
        assert.include(warnings[0], refused.id)
        assert.include(warnings[0], "HttpNotAllowed")
        assert.include(warnings[1], redirected.id)
        assert.include(warnings[1], "302")
        for (const w of warnings) assert.notInclude(w, "/re", "no path in the log: it may hold a secret")
        // Within the minute: attempted again, nothing more said.
        yield* TestClock.adjust(Duration.seconds(59))
        yield* attempts
        assert.strictEqual(warnings.length, 2, "at most once a minute per subscription")
        yield* TestClock.adjust(Duration.seconds(1))
        yield* attempts
        assert.strictEqual(warnings.length, 4, "and again after the minute")
        assert.deepStrictEqual(
          redirecting.log.map((r) => r.path),
          ["/redirect", "/redirect", "/redirect"],
          "nothing reached the refused target; the redirect was not followed",
        )
      }).pipe(Effect.scoped, Effect.provide(TestClock.layer())),
    60_000,
  )

  it.effect(
    "WebhookKeyErrorWarns: a signing secret the worker's key cannot open is a warning naming the subscription, once a minute; nothing is sent",
    () =>
      Effect.gen(function* () {
        yield* TestClock.setTime(Date.now())
        const sql = yield* SqlClient.SqlClient
        const warnings: Array<string> = []
        const capture = Logger.make(({ logLevel, message }) => {
          if (logLevel === "Warn") warnings.push(Array.isArray(message) ? message.join(" ") : String(message))
        })
        const receiver = yield* WebhookReceiver.start(() => ({ status: 200 }))
        const sub = yield* TestWebhooks.subscribe("owner-k", receiver.url("/k"), ["warn-k"])
        // Sealed by a worker with another key.
        yield* sql`
          UPDATE webhook_subscriptions
          SET secret_sealed = ${SecretBox.seal(TestWebhooks.secretKey(), WebhookSecret.generate())}
          WHERE id = ${sub.id}::uuid`
        yield* (yield* EventLog).append([{ space: "warn-k", type: "item.created", actor: "a", payload: {} }])
        yield* TestWebhooks.round()
        const kind = yield* WebhookDrainer.makeWith({ linger: 0 })
        const job = yield* TestWebhooks.drainJob(sub.id)
        const attempt = kind
          .run({ subscription: sub.id }, job)
          .pipe(Effect.flip, Effect.provide(Logger.layer([capture])))
        const error = yield* attempt
        assert.strictEqual(error._tag, "SecretBoxError", "the run fails, and the job runtime retries it")
        yield* TestClock.adjust(Duration.seconds(30))
        yield* attempt
        assert.strictEqual(warnings.length, 1, warnings.join("\n"))
        assert.include(warnings[0], sub.id)
        yield* TestClock.adjust(Duration.seconds(30))
        yield* attempt
        assert.strictEqual(warnings.length, 2, "again after the minute")
        assert.strictEqual(receiver.log.length, 0)
      }).pipe(Effect.scoped, Effect.provide(TestClock.layer())),
    60_000,
  )
})
