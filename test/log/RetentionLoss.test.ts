import { assert, layer } from "@effect/vitest"
import { Duration, Effect, Layer, Metric } from "effect"
import * as PermissionGrants from "../../src/authz/PermissionGrants.ts"
import { pushDeliver, webhookDeliver } from "../../src/authz/Permissions.ts"
import * as Retention from "../../src/log/Retention.ts"
import * as PushAudience from "../../src/push/PushAudience.ts"
import { PushConfig } from "../../src/push/PushConfig.ts"
import * as PushMetrics from "../../src/push/PushMetrics.ts"
import * as PushRegistrations from "../../src/push/PushRegistrations.ts"
import { WebhookSubscriptions } from "../../src/webhooks/subscriptions/WebhookSubscriptions.ts"
import * as WebhookReceiver from "../../testkit/WebhookReceiver.ts"
import { appendAt, dayMillis, days } from "../support/OldEvents.ts"
import * as TestPush from "../support/TestPush.ts"
import * as TestWebhooks from "../support/TestWebhooks.ts"

const Live = PushAudience.layer.pipe(
  Layer.provideMerge(PushConfig.layerWith(TestPush.settings())),
  Layer.provideMerge(TestWebhooks.layer()),
)

layer(Live, { excludeTestServices: true })("Retention and loss", (it) => {
  it.effect(
    "ConsumerStalledPastRetentionReportsGap: events whose days left the log before the consumers read them are reported as a lost range: the webhooks consumer disables the subscriptions that began before them with cause gap, the push consumer counts them and goes on with the events that are still there",
    () =>
      Effect.gen(function* () {
        const now = Date.now()
        yield* days(now - 12 * dayMillis, 12)
        const receiver = yield* WebhookReceiver.start(() => ({ status: 200 }))
        yield* PermissionGrants.grant("owner-l", webhookDeliver, "old")
        const sub = yield* TestWebhooks.subscribe("owner-l", receiver.url("/l"), ["old"])
        yield* PushAudience.join("old", "lou")
        yield* PermissionGrants.grant("lou", pushDeliver, "old")
        yield* PushRegistrations.register("lou", TestPush.unheardSubscription())

        // Both consumers stand still while two events age past the window and one stays.
        const gone = yield* appendAt([now - 11 * dayMillis, now - 10 * dayMillis])
        const [kept] = yield* appendAt([now - dayMillis])
        const run = yield* Retention.run({ retention: Duration.days(7), dropPause: Duration.zero })
        assert.isAtLeast(run.dropped.length, 2)

        const webhooks = yield* TestWebhooks.round()
        assert.strictEqual(webhooks._tag, "Processed")
        if (webhooks._tag === "Processed") {
          assert.deepStrictEqual(webhooks.lost, [{ firstSeq: gone[0]!, lastSeq: gone[1]! }])
        }
        const state = yield* (yield* WebhookSubscriptions).get(sub.id)
        assert.deepStrictEqual([state.state, state.disabledCause], ["disabled", "gap"])

        const lostBefore = (yield* Metric.value(PushMetrics.eventsLost)).count
        const push = yield* TestPush.round()
        assert.strictEqual(push._tag, "Processed")
        if (push._tag === "Processed") {
          assert.deepStrictEqual(push.lost, [{ firstSeq: gone[0]!, lastSeq: gone[1]! }])
          assert.strictEqual(push.jobs, 1, "the event still in the log gets its push")
        }
        assert.strictEqual((yield* Metric.value(PushMetrics.eventsLost)).count - lostBefore, 2)
        assert.deepStrictEqual(
          (yield* TestPush.jobs).map((j) => BigInt(j.seq)),
          [kept!],
        )
      }).pipe(Effect.scoped),
  )
})
