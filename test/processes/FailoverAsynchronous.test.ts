/**
 * Failover with an asynchronous standby that lost the tail: the standby is stopped while the
 * primary goes on appending and delivering, then the primary is SIGKILLed, the standby started
 * again and promoted. Its log lacks events the receiver already got webhooks for, and the producer
 * goes on appending at once, so new events soon take the lost seqs. The workers' rounds find the
 * events they read gone (`LogRewind`), one finalizes it as `bothy restore finalize` does (a new
 * epoch, cursors at the head), and delivery goes on in the new epoch in the same processes. Every
 * wait is on a signal (a line, the receiver's queue, a count).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Standby from "../../testkit/Standby.ts"
import * as FailoverDrill from "../support/FailoverDrill.ts"

describe("failover", () => {
  it.live(
    "FailoverAsynchronousIsDetected: the primary SIGKILLed after appends its asynchronous standby never received, the standby promoted: a worker finds the log gone back, finalizes it as a restore (new epoch), delivery goes on, and the receiver never gets one (epoch, sequence) id for two events",
    () =>
      Effect.gen(function* () {
        const drill = yield* Standby.start({ synchronous: false })
        const { url, receiver, workers } = yield* FailoverDrill.setUp(drill)
        const producer = yield* FailoverDrill.produce(url)
        const seen: Array<FailoverDrill.Delivery> = []
        yield* producer.until(10)
        yield* FailoverDrill.receiveAll(receiver, seen, yield* producer.acknowledged)
        yield* drill.caughtUp

        // The tail the standby never gets: appended and delivered while it is down.
        yield* drill.stopStandby
        const kept = (yield* producer.acknowledged).length
        yield* producer.until(kept + 30)
        yield* FailoverDrill.receiveAll(receiver, seen, yield* producer.acknowledged)
        const firstEpoch = seen[0]!.epoch

        yield* drill.killPrimary
        yield* drill.startStandby
        yield* drill.promote
        const rewound = yield* Effect.raceAll(workers.map((w) => w.waitFor(/the event log went back/))).pipe(
          Effect.timeoutOrElse({
            duration: "30 seconds",
            orElse: () => Effect.die("no worker found the log gone back"),
          }),
        )
        const finalized = yield* Effect.raceAll(
          workers.map((w) => w.waitFor(/finalized the log's rewind as a restore: epoch \d+ -> \d+/)),
        )
        // Appends acknowledged from here on committed after the finalize: the new epoch.
        const after = (yield* producer.acknowledged).length
        yield* producer.until(after + 20)
        yield* producer.stop
        const wanted = (yield* producer.acknowledged).slice(after)
        yield* FailoverDrill.receiveAll(receiver, seen, wanted)

        assert.match(rewound, /bothy restore finalize/)
        const [, from, to] = /epoch (\d+) -> (\d+)/.exec(finalized)!
        assert.strictEqual(Number(from), firstEpoch)
        for (const w of workers) assert.isNull(w.child.exitCode, "a worker process went on through the failover")
        const byId = new Map<string, number>()
        for (const d of seen) {
          assert.match(d.id, new RegExp(`^msg_${d.epoch}_[0-9a-f-]+_${d.sequence}$`))
          const first = byId.get(d.id)
          if (first === undefined) byId.set(d.id, d.n)
          else assert.strictEqual(first, d.n, `webhook-id ${d.id} came with two events`)
        }
        const late = seen.filter((d) => wanted.includes(d.n))
        assert.isTrue(
          late.every((d) => d.epoch === Number(to)),
          "appends after the finalize go out in the new epoch",
        )
      }).pipe(Effect.scoped),
    90_000,
  )
})
