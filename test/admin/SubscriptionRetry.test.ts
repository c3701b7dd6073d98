/**
 * An owner whose endpoint is back does not wait out the retry delay: "retry now" resumes the
 * subscription's pending deliveries at once, in order, through its one drainer.
 */
import { assert, layer } from "@effect/vitest"
import { Duration, Effect, Layer, Option, Redacted } from "effect"
import { AdminAuth } from "../../src/admin/AdminAuth.ts"
import { PushConfig } from "../../src/push/PushConfig.ts"
import * as WebhookReceiver from "../../testkit/WebhookReceiver.ts"
import * as TestAdmin from "../support/TestAdmin.ts"
import * as TestPush from "../support/TestPush.ts"
import * as TestWebhooks from "../support/TestWebhooks.ts"

// A failed request waits an hour for its retry: only "retry now" sends it sooner.
const Live = TestWebhooks.layer({ retrySteps: [Duration.hours(1)] }).pipe(
  Layer.provideMerge(PushConfig.layerWith(TestPush.settings())),
)

const token = "admin-retry-token-0123456789"

layer(Live, { excludeTestServices: true })("retry now", (it) => {
  it.effect(
    "SubscriptionRetryNow: after a failure scheduled an hour out, POST /v1/subscriptions/:id/retry sends the pending deliveries at once, in order",
    () =>
      Effect.gen(function* () {
        const signals = yield* TestWebhooks.signals
        yield* TestWebhooks.startDrainers(signals)
        let status = 503
        const receiver = yield* WebhookReceiver.start(() => ({ status }))
        const sub = yield* TestWebhooks.subscribe("retry-owner", receiver.url("/hook"), ["retry"])
        for (const i of [1, 2, 3]) yield* TestWebhooks.append("retry", { i })
        yield* TestWebhooks.round()
        // The first delivery fails; its drainer waits an hour, holding the two behind it.
        yield* signals.until(
          Effect.map(TestWebhooks.deliveries(sub.id), (rows) => rows[0]?.attempts === 1),
          "30 seconds",
        )
        const base = yield* TestAdmin.serve(AdminAuth.token(Option.some(Redacted.make(token))))
        const admin = TestAdmin.client(base, { token })

        status = 200
        const retried = yield* admin.post(`/v1/subscriptions/${sub.id}/retry`)
        assert.strictEqual(retried.status, 200, JSON.stringify(retried.body))
        assert.strictEqual(retried.body.outcome, "resumed")
        assert.strictEqual(retried.body.pending, 3)
        yield* TestWebhooks.deliveredThrough(signals, sub.id, 3).pipe(Effect.timeout("20 seconds"))
        assert.deepStrictEqual(
          receiver.log.map((r) => [r.status, TestWebhooks.envelope(r).data.i]),
          [
            [503, 1],
            [200, 1],
            [200, 2],
            [200, 3],
          ],
        )

        const idle = yield* admin.post(`/v1/subscriptions/${sub.id}/retry`)
        assert.deepStrictEqual(idle.body, { outcome: "nothing_pending", job: null, pending: 0 })
        const missing = yield* admin.post("/v1/subscriptions/00000000-0000-4000-8000-000000000000/retry")
        assert.strictEqual(missing.status, 404)
      }).pipe(Effect.scoped),
    60_000,
  )
})
