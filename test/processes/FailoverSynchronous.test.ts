/**
 * Failover with a synchronous standby: a primary and its standby (`testkit/Standby`), two `bothy
 * worker` processes and a producer on a URL naming both hosts, a receiver verifying every webhook.
 * The primary is SIGKILLed mid-run and the standby promoted; the same worker processes go on
 * against it. Every wait is on a signal (a start line, the receiver's queue, a count).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Standby from "../../testkit/Standby.ts"
import * as FailoverDrill from "../support/FailoverDrill.ts"

describe("failover", () => {
  it.live(
    "FailoverSynchronousLosesNothing: the primary SIGKILLed under two workers and a producer, the synchronous standby promoted: the same worker processes find it, and every acknowledged append is delivered, once by webhook-id and in order (the subscription's sequence gap-free)",
    () =>
      Effect.gen(function* () {
        const drill = yield* Standby.start({ synchronous: true })
        const { url, receiver, workers } = yield* FailoverDrill.setUp(drill)
        const producer = yield* FailoverDrill.produce(url)
        const seen: Array<FailoverDrill.Delivery> = []
        yield* producer.until(30)
        yield* FailoverDrill.receiveAll(receiver, seen, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10])

        yield* drill.killPrimary
        yield* drill.promote
        const before = (yield* producer.acknowledged).length
        yield* producer.until(before + 30)
        yield* producer.stop
        const acknowledged = yield* producer.acknowledged
        yield* FailoverDrill.receiveAll(receiver, seen, acknowledged)

        for (const w of workers) assert.isNull(w.child.exitCode, "a worker process went on through the failover")
        const byId = new Map<string, FailoverDrill.Delivery>()
        for (const d of seen) {
          const first = byId.get(d.id)
          if (first === undefined) byId.set(d.id, d)
          else assert.strictEqual(first.n, d.n, `webhook-id ${d.id} came with two events`)
        }
        const once = [...byId.values()].sort((a, b) => a.sequence - b.sequence)
        assert.deepStrictEqual(
          once.map((d) => d.sequence),
          once.map((_, i) => i + 1),
          "the sequence is gap-free",
        )
        assert.isTrue(
          once.every((d, i) => i === 0 || d.n > once[i - 1]!.n),
          "events arrive in the order of their appends",
        )
        assert.strictEqual(new Set(once.map((d) => d.n)).size, once.length, "each event delivered once")
        assert.strictEqual(new Set(once.map((d) => d.epoch)).size, 1, "no new epoch: nothing was lost")
        assert.isTrue(receiver.log.every((r) => r.status === 200))
      }).pipe(Effect.scoped),
    90_000,
  )
})
