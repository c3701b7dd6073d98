import { assert, describe, it, layer } from "@effect/vitest"
import { Clock, Context, type Duration, Effect, Layer, Option, Queue } from "effect"
import { SqlClient } from "effect/sql"
import { TestClock } from "effect/testing"
import * as Consumer from "../../src/consumer/Consumer.ts"
import type { RoundOutcome } from "../../src/consumer/ConsumerRound.ts"
import { Jobs } from "../../src/jobs/Jobs.ts"
import { EventLog } from "../../src/log/EventLog.ts"
import { NotificationStream, type Wake } from "../../src/platform/NotificationStream.ts"
import * as LogModes from "../support/LogModes.ts"
import * as TestConsumer from "../support/TestConsumer.ts"
import * as TestDatabase from "../support/TestDatabase.ts"

type Seen = RoundOutcome | { readonly _tag: "Failed" }

/** Starts a consumer in the current scope; its outcomes arrive on the returned queue. */
const startConsumer = (name: string, pollInterval: Duration.Input, cooldown?: Duration.Input) =>
  Effect.gen(function* () {
    yield* TestConsumer.register(name)
    const outcomes = yield* Queue.unbounded<Seen>()
    const context = yield* Layer.build(
      Consumer.layer({
        name,
        batchSize: 50,
        pollInterval,
        cooldown,
        onLoss: () => Effect.void,
        fanOut: (events) => Effect.succeed(TestConsumer.fanOutJobs(events, 2)),
        onRound: (o) => Queue.offer(outcomes, o).pipe(Effect.asVoid),
      }),
    )
    return { outcomes, context }
  })

/** Takes outcomes until the consumer's cursor reaches `seq`. */
const untilCursor = (outcomes: Queue.Dequeue<Seen>, seq: bigint) =>
  Effect.gen(function* () {
    const seen: Array<Seen> = []
    for (;;) {
      const o = yield* Queue.take(outcomes)
      seen.push(o)
      assert.notStrictEqual(o._tag, "Failed")
      if (o._tag === "Processed" && o.toSeq >= seq) return seen
    }
  })

/** A listener whose connection is up, with a probe subscription that sees its wake-ups. */
const connectedStream = Effect.gen(function* () {
  const context = yield* Layer.build(NotificationStream.layer())
  const stream = Context.get(context, NotificationStream)
  const wakes = yield* Queue.unbounded<Wake>()
  yield* stream.subscribe("event_log", (w) => Queue.offer(wakes, w).pipe(Effect.asVoid))
  while ((yield* Queue.take(wakes))._tag !== "Connected") {}
  return { context, stream, wakes }
})

const appendSome = (n: number) =>
  Effect.gen(function* () {
    const log = yield* EventLog
    const appended = yield* log.append(
      Array.from({ length: n }, (_, i) => ({ space: "s", type: "t", actor: "a", payload: { i } })),
    )
    // Live time for the wait on the sequencer (post_commit mode), whatever clock the test runs on.
    return appended._tag === "Sequenced"
      ? appended.lastSeq
      : (yield* TestClock.withLive(log.sequenced(appended))).lastSeq
  })

describe("Consumer cooldown", () => {
  it.effect(
    "ConsumerCooldownWithTestClock: wake-ups during the cooldown wait for its end and share one serving; an idle one is served at once; a serving longer than the cooldown is followed at once",
    () =>
      Effect.gen(function* () {
        const wake = yield* Queue.sliding<void>(1)
        const starts: Array<number> = []
        let slow = false
        const serve = Effect.gen(function* () {
          starts.push(yield* Clock.currentTimeMillis)
          if (slow) yield* Effect.sleep("1500 millis")
        })
        yield* Consumer.serveWakeUps(wake, serve, "1 second").pipe(Effect.forkScoped)
        const poke = Queue.offer(wake, undefined)
        const settle = TestClock.adjust(0)

        yield* poke
        yield* settle
        assert.deepStrictEqual(starts, [0], "served at once")
        yield* poke
        yield* poke
        yield* TestClock.adjust("999 millis")
        assert.deepStrictEqual(starts, [0], "wake-ups during the cooldown wait")
        yield* TestClock.adjust("1 millis")
        assert.deepStrictEqual(starts, [0, 1000], "and share one serving at its end")

        yield* TestClock.adjust("5 seconds")
        yield* poke
        yield* settle
        assert.deepStrictEqual(starts, [0, 1000, 6000], "idle: served at once")

        yield* TestClock.adjust("1 second")
        slow = true
        yield* poke
        yield* settle
        yield* poke
        yield* TestClock.adjust("1500 millis")
        assert.deepStrictEqual(starts, [0, 1000, 6000, 7000, 8500], "no wait after a serving longer than the cooldown")
      }).pipe(Effect.scoped, Effect.provide(TestClock.layer())),
  )
})

for (const mode of LogModes.modes) {
  const Live = Layer.mergeAll(LogModes.eventLog(mode), Jobs.layer).pipe(Layer.provideMerge(TestDatabase.layer()))
  layer(Live, { excludeTestServices: true })(`Consumer wake-ups (${mode})`, (it) => {
    it.effect("ConsumerWakesOnNotify: a committed append starts a round with no time passing", () =>
      Effect.gen(function* () {
        const { context } = yield* connectedStream
        const before = yield* Clock.currentTimeMillis
        const { outcomes } = yield* startConsumer("woken_by_notify", "1 hour").pipe(Effect.provide(context))
        // The start-up round, then nothing until something is committed.
        assert.strictEqual((yield* Queue.take(outcomes))._tag, "CaughtUp")
        const start = yield* TestConsumer.cursor("woken_by_notify")
        const last = yield* appendSome(7)
        const seen = yield* untilCursor(outcomes, last)
        assert.strictEqual(seen.at(-1)!._tag, "Processed")
        assert.strictEqual(yield* Clock.currentTimeMillis, before, "no time advanced: the NOTIFY woke it")
        yield* TestConsumer.assertExactlyOnce("woken_by_notify", start, last, 2)
      }).pipe(Effect.scoped, Effect.provide(TestClock.layer())),
    )

    it.effect("ConsumerWakesOnPoll: with no NOTIFY reaching it, the poll interval gets the events processed", () =>
      Effect.gen(function* () {
        // A stream that never delivers anything, as when notifications are lost.
        const silent = Layer.succeed(NotificationStream)({
          subscribe: () => Effect.void,
          backendPid: Effect.succeed(Option.none()),
          sessions: () => Effect.void,
          abandon: () => Effect.void,
          wakeups: Effect.succeed({ _tag: "PollOnly", reason: "a silent stream" }),
        })
        const { outcomes } = yield* startConsumer("woken_by_poll", "5 seconds").pipe(Effect.provide(silent))
        assert.strictEqual((yield* Queue.take(outcomes))._tag, "CaughtUp")
        const start = yield* TestConsumer.cursor("woken_by_poll")
        const last = yield* appendSome(5)
        yield* TestClock.adjust("4 seconds")
        assert.strictEqual(yield* TestConsumer.cursor("woken_by_poll"), start, "not before the interval")
        yield* TestClock.adjust("1 second")
        yield* untilCursor(outcomes, last)
        yield* TestConsumer.assertExactlyOnce("woken_by_poll", start, last, 2)
      }).pipe(Effect.scoped, Effect.provide(TestClock.layer())),
    )

    it.effect(
      "ConsumerCooldownServesNotifiesTogether: an idle consumer is woken at once; appends during the cooldown are served by one wake-up at its end, full batches back to back",
      () =>
        Effect.gen(function* () {
          const { context, wakes } = yield* connectedStream
          const name = "cooled"
          const { outcomes } = yield* startConsumer(name, "1 hour", "1 second").pipe(Effect.provide(context))
          assert.strictEqual((yield* Queue.take(outcomes))._tag, "CaughtUp")
          // The start-up round's cooldown runs out; from then on the consumer is idle.
          yield* TestClock.adjust("1 second")
          const start = yield* TestConsumer.cursor(name)

          /** Appends and waits until the shared listener has passed the NOTIFY on. */
          const appendNotified = (n: number) =>
            Effect.gen(function* () {
              const last = yield* appendSome(n)
              while ((yield* Queue.take(wakes))._tag !== "Notified") {}
              return last
            })

          const idleAt = yield* Clock.currentTimeMillis
          const first = yield* appendNotified(3)
          yield* untilCursor(outcomes, first)
          assert.strictEqual(yield* Clock.currentTimeMillis, idleAt, "an idle consumer is woken at once")

          // Cooling down now: 120 events in two appends, two NOTIFYs, no round yet.
          yield* appendNotified(20)
          const last = yield* appendNotified(100)
          const before = yield* Clock.currentTimeMillis
          yield* TestClock.adjust("1 second")
          const seen = yield* untilCursor(outcomes, last)
          assert.deepStrictEqual(
            seen.map((o) => (o._tag === "Processed" ? o.events : o._tag)),
            [50, 50, 20],
            "one wake-up served both NOTIFYs, its full batches back to back",
          )
          assert.strictEqual(yield* Clock.currentTimeMillis, before + 1000)
          yield* TestConsumer.assertExactlyOnce(name, start, last, 2)
        }).pipe(Effect.scoped, Effect.provide(TestClock.layer())),
    )

    // About the consumer's LISTEN connection alone: the appends run inside a transaction that holds
    // the database closed, where post_commit mode could not number them.
    it.effect.skipIf(mode !== "counter")(
      "ConsumerListenLossLosesNothing: events committed while the LISTEN connection is lost are all processed by the reconnect's catch-up round alone",
      () =>
        Effect.gen(function* () {
          const sql = yield* SqlClient.SqlClient
          const db = yield* TestDatabase.TestDatabase
          const { context, stream, wakes } = yield* connectedStream
          // The poll (an hour, on the live clock) cannot be what reaches the head within the test.
          const { outcomes } = yield* startConsumer("listen_loss", "1 hour").pipe(Effect.provide(context))
          assert.strictEqual((yield* Queue.take(outcomes))._tag, "CaughtUp")
          const start = yield* TestConsumer.cursor("listen_loss")
          const firstPid = Option.getOrThrow(yield* stream.backendPid)

          // While the listener is gone it cannot come back: the database refuses new connections
          // (the append's transaction holds a connection taken before). So every NOTIFY of these
          // appends finds nobody listening, and nothing is appended once the listener is back.
          const connections = (allow: boolean) =>
            TestDatabase.adminSql(`ALTER DATABASE "${db.name}" ALLOW_CONNECTIONS ${allow}`)
          const head = yield* sql
            .withTransaction(
              Effect.gen(function* () {
                yield* connections(false)
                const [gone] = yield* sql<{ gone: boolean }>`SELECT pg_terminate_backend(${firstPid}, 10000) AS gone`
                assert.isTrue(gone!.gone, "the listening backend has exited")
                return yield* appendSome(120)
              }),
            )
            .pipe(Effect.ensuring(Effect.orDie(connections(true))))
          assert.strictEqual(yield* TestConsumer.cursor("listen_loss"), start, "no wake-up reached the consumer")

          while ((yield* Queue.take(wakes))._tag !== "Connected") {}
          assert.notStrictEqual(Option.getOrThrow(yield* stream.backendPid), firstPid, "listening on a new backend")
          const seen = yield* untilCursor(outcomes, head).pipe(
            Effect.timeoutOrElse({
              duration: "20 seconds",
              orElse: () =>
                Effect.sync(() =>
                  assert.fail(
                    "ConsumerListenLossLosesNothing: the reconnect's catch-up did not bring the cursor to the head",
                  ),
                ),
            }),
          )
          assert.deepStrictEqual(
            seen.map((o) => (o._tag === "Processed" ? o.events : o._tag)),
            [50, 50, 20],
            "one wake-up, its rounds back to back",
          )
          yield* TestConsumer.assertExactlyOnce("listen_loss", start, head, 2)
        }).pipe(Effect.scoped),
    )
  })
}
