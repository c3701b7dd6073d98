import { assert, layer } from "@effect/vitest"
import { Effect, Layer, Option, Queue } from "effect"
import { SqlClient } from "effect/sql"
import { NotificationStream, type Wake } from "../../src/platform/NotificationStream.ts"
import * as TestDatabase from "../support/TestDatabase.ts"

const Live = NotificationStream.layer().pipe(Layer.provideMerge(TestDatabase.layer()))

/** Subscribes to `channel`; its wake-ups arrive on the returned queue. */
const subscribe = (channel: string) =>
  Effect.gen(function* () {
    const stream = yield* NotificationStream
    const wakes = yield* Queue.unbounded<Wake>()
    yield* stream.subscribe(channel, (w) => Queue.offer(wakes, w).pipe(Effect.asVoid))
    return wakes
  })

/** The next wake-up; the timeout guards against a hang and is no speed target. */
const next = (wakes: Queue.Dequeue<Wake>) => Queue.take(wakes).pipe(Effect.timeout("20 seconds"))

const notify = (channel: string, payload: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) => sql`SELECT pg_notify(${channel}, ${payload})`)

/** Waits until the stream is connected (its first subscriber is woken); the probe and the backend's pid. */
const connected = Effect.gen(function* () {
  const probe = yield* subscribe("probe")
  assert.deepStrictEqual(yield* next(probe), { _tag: "Connected" })
  return { probe, pid: Option.getOrThrow(yield* (yield* NotificationStream).backendPid) }
})

/** Takes wake-ups until both a `Connected` and the NOTIFY `payload` came (they may come in either order). */
const connectedAndNotified = (wakes: Queue.Dequeue<Wake>, payload: string) =>
  Effect.gen(function* () {
    let connect = false
    let notified = false
    while (!(connect && notified)) {
      const wake = yield* next(wakes)
      if (wake._tag === "Connected") connect = true
      else {
        assert.strictEqual(wake.payload, payload)
        notified = true
      }
    }
  })

layer(Live, { excludeTestServices: true })("NotificationStream", (it) => {
  it.effect(
    "NotificationStreamListensOnSubscribe: a subscriber to a channel nobody listened on yet is woken as connected before subscribe returns, and gets a NOTIFY sent right after",
    () =>
      Effect.gen(function* () {
        yield* connected
        for (let i = 0; i < 20; i++) {
          const channel = `fresh_${i}`
          const wakes = yield* subscribe(channel)
          assert.deepStrictEqual(yield* Queue.poll(wakes), Option.some({ _tag: "Connected" } as const), channel)
          yield* notify(channel, `n${i}`)
          assert.deepStrictEqual(yield* next(wakes), { _tag: "Notified", payload: `n${i}` }, channel)
        }
        // A second subscriber to a channel already listened on: the same, without a new LISTEN.
        const again = yield* subscribe("fresh_0")
        assert.deepStrictEqual(yield* Queue.poll(again), Option.some({ _tag: "Connected" } as const))
        yield* notify("fresh_0", "both")
        assert.deepStrictEqual(yield* next(again), { _tag: "Notified", payload: "both" })
      }).pipe(Effect.scoped),
  )

  it.effect(
    "NotificationStreamRelistensAfterLoss: after pg_terminate_backend of the listening backend, every subscriber, one who subscribed meanwhile too, is woken as connected and gets later NOTIFYs",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const { probe, pid } = yield* connected
        const before = yield* subscribe("before_loss")
        assert.deepStrictEqual(yield* next(before), { _tag: "Connected" })

        yield* sql`SELECT pg_terminate_backend(${pid})`
        // Whether the stream has noticed the loss yet or not, this subscriber is served.
        const during = yield* subscribe("during_loss")
        // The new connection wakes the probe only once it listens on every channel subscribed.
        assert.deepStrictEqual(yield* next(probe), { _tag: "Connected" })
        const now = yield* (yield* NotificationStream).backendPid
        assert.isTrue(Option.isSome(now) && now.value !== pid, "a new backend listens")
        for (const [channel, wakes] of [
          ["before_loss", before],
          ["during_loss", during],
        ] as const) {
          yield* notify(channel, "after")
          yield* connectedAndNotified(wakes, "after")
        }
      }).pipe(Effect.scoped),
  )
})
