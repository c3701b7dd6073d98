/**
 * The overview's lag ring: a sample at once and one every interval by `Clock` (TestClock here),
 * each with every consumer's lag as the database has it then, the newest `capacity` kept.
 */
import { assert, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { TestClock } from "effect/testing"
import { LagSamples, layerWith } from "../../src/console/LagSampler.ts"
import { eventually } from "../support/Eventually.ts"
import * as TestWebhooks from "../support/TestWebhooks.ts"

layer(TestWebhooks.layer())("the lag sampler", (it) => {
  it.effect("LagSamplerKeepsAnHour: one sample per interval, each consumer's lag as it was, the newest kept", () =>
    Effect.gen(function* () {
      const context = yield* Layer.build(layerWith({ interval: "10 seconds", capacity: 3 }))
      const ring = Effect.flatMap(LagSamples, (s) => s.samples).pipe(Effect.provide(context))
      // Each sample reads the database for real: wait for it on the live clock.
      const samplesAt = (n: number, at: number) =>
        TestClock.withLive(
          eventually(ring, (s) => s.length === n && s.at(-1)?.at === at, {
            what: `${n} samples, the last at ${at}`,
            within: "20 seconds",
            every: "20 millis",
          }),
        )
      const first = yield* samplesAt(1, 0)
      assert.strictEqual(first[0]!.lags.webhooks, 0)
      assert.strictEqual(first[0]!.oldestPendingSeconds, 0)

      yield* TestWebhooks.append("lag-space", { i: 1 })
      yield* TestWebhooks.append("lag-space", { i: 2 })
      yield* TestClock.adjust("9 seconds")
      yield* samplesAt(1, 0)
      yield* TestClock.adjust("1 second")
      assert.strictEqual((yield* samplesAt(2, 10))[1]!.lags.webhooks, 2, "the lag when it was sampled")

      yield* TestWebhooks.round()
      for (const at of [20, 30]) {
        yield* TestClock.adjust("10 seconds")
        yield* samplesAt(3, at)
      }
      const kept = yield* ring
      assert.deepStrictEqual(
        kept.map((s) => s.at),
        [10, 20, 30],
        "the oldest gone",
      )
      assert.deepStrictEqual(
        kept.map((s) => s.lags.webhooks),
        [2, 0, 0],
      )
    }).pipe(Effect.scoped),
  )
})
