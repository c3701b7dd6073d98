/**
 * An operator hears of a subscription's trouble: one line when it starts failing, one when it
 * recovers, and nothing for the retries between.
 */
import { assert, layer } from "@effect/vitest"
import { Effect, Logger } from "effect"
import { EventLog } from "../../../src/log/EventLog.ts"
import * as WebhookDrainer from "../../../src/webhooks/drain/WebhookDrainer.ts"
import * as WebhookReceiver from "../../../testkit/WebhookReceiver.ts"
import * as TestWebhooks from "../../support/TestWebhooks.ts"

layer(TestWebhooks.layer(), { excludeTestServices: true })("failing subscriptions", (it) => {
  it.effect(
    "SubscriptionFailingIsLogged: one WARN line when a subscription starts failing, one when it recovers, none per retry",
    () =>
      Effect.gen(function* () {
        const warnings: Array<string> = []
        const capture = Logger.make(({ logLevel, message }) => {
          if (logLevel === "Warn") warnings.push(Array.isArray(message) ? message.join(" ") : String(message))
        })
        let status = 500
        const receiver = yield* WebhookReceiver.start(() => ({ status }))
        const sub = yield* TestWebhooks.subscribe("owner-f", receiver.url("/hook/tok_secret"), ["failing"])
        yield* (yield* EventLog).append([{ space: "failing", type: "item.created", actor: "a", payload: {} }])
        yield* TestWebhooks.round()
        const kind = yield* WebhookDrainer.makeWith({ linger: 0 })
        const job = yield* TestWebhooks.drainJob(sub.id)
        // One attempt of the drain job, as the job runtime would run it after each retry delay.
        const attempt = kind.run({ subscription: sub.id }, job).pipe(
          Effect.catchTag("JobSnooze", () => Effect.void),
          Effect.provide(Logger.layer([capture])),
        )

        yield* attempt
        assert.strictEqual(warnings.length, 1, warnings.join("\n"))
        assert.include(warnings[0], sub.id)
        assert.include(warnings[0], "started failing, answered 500")
        yield* attempt
        yield* attempt
        assert.strictEqual(warnings.length, 1, `retries say nothing more:\n${warnings.join("\n")}`)

        status = 200
        yield* attempt
        assert.strictEqual(warnings.length, 2, warnings.join("\n"))
        assert.include(warnings[1], sub.id)
        assert.include(warnings[1], "recovered, delivered again after failing since")
        for (const w of warnings) assert.notInclude(w, "tok_secret", "origins only: a path may hold a secret")
        assert.deepStrictEqual(
          receiver.log.map((r) => r.status),
          [500, 500, 500, 200],
        )
      }),
  )
})
