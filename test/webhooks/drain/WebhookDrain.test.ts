import { assert, layer } from "@effect/vitest"
import { Duration, Effect, Exit, Layer, Queue, Scope } from "effect"
import { SqlClient } from "effect/sql"
import * as Consumer from "../../../src/consumer/Consumer.ts"
import * as JobWorker from "../../../src/jobs/JobWorker.ts"
import { EventLog, timeOf } from "../../../src/log/EventLog.ts"
import * as WebhookDrainer from "../../../src/webhooks/drain/WebhookDrainer.ts"
import { WebhookSubscriptions } from "../../../src/webhooks/subscriptions/WebhookSubscriptions.ts"
import * as WebhookFanOut from "../../../src/webhooks/WebhookFanOut.ts"
import * as WebhookReceiver from "../../../testkit/WebhookReceiver.ts"
import * as TestWebhooks from "../../support/TestWebhooks.ts"

// A retry step far beyond the test: a failed delivery's drainer sleeps through it.
const Live = TestWebhooks.layer({ retrySteps: [Duration.hours(1)], pool: { maxConnections: 16 } })

/**
 * Drainers that only a NOTIFY can start: the worker's poll and its rescuer (half the lease) never
 * fire within the test, so a delivery left without a drainer stays pending. Their records and
 * job outcomes wake `signals`.
 */
const drainers = (
  signals: TestWebhooks.Signals,
  shutdownTimeout: Duration.Input = Duration.seconds(10),
  options: WebhookDrainer.DrainOptions = {},
  pollInterval: Duration.Input = Duration.hours(1),
) =>
  Effect.gen(function* () {
    const kind = yield* WebhookDrainer.makeWith({ onRecorded: signals.onRecorded, ...options })
    yield* Layer.build(
      JobWorker.layer({
        kinds: [kind],
        queues: { webhooks: { concurrency: 8 } },
        pollInterval,
        lease: "2 hours",
        shutdownTimeout,
        onFinalized: signals.onFinalized,
      }),
    )
  })
/** For tests of what drainers do rather than of how they are woken: the worker also polls. */
const pollingDrainers = (signals: TestWebhooks.Signals, shutdownTimeout?: Duration.Input) =>
  drainers(signals, shutdownTimeout, {}, Duration.seconds(1))

/**
 * The `webhooks` round with a pause after its fan-out (it widens the window; with a release whose
 * pending check runs in the statement that waits for the lock, instead of a later one, the
 * no-lost-wake-up test below fails: a drainer lets go although the round it waited for added
 * deliveries, and they stay pending), while it holds the drain rows it bumped:
 * a drainer that finishes meanwhile must wait for the round's commit and then see its deliveries.
 */
const slowRound = Effect.flatMap(
  Consumer.makeRound({
    name: WebhookFanOut.name,
    batchSize: 10,
    fanOut: (events) =>
      WebhookFanOut.fanOut(events).pipe(Effect.tap(() => Effect.sleep(Duration.millis(Math.random() * 4)))),
    onLoss: WebhookFanOut.onLoss,
  }),
  (round) => round,
)

/** An `item.created` event in `space` carrying `payload`. */
const appendItem = (space: string, payload: Record<string, number>) =>
  Effect.asVoid(TestWebhooks.append(space, payload))

/** The number a test put in the payload of the event a request carries. */
const numberIn = (body: string, key = "n") => (JSON.parse(body) as { data: Record<string, number> }).data[key]!

const pendingCount = Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => sql<{ n: number }>`SELECT count(*)::int AS n FROM webhook_deliveries WHERE state = 'pending'`,
).pipe(Effect.map((rows) => rows[0]!.n))

/**
 * Short rounds racing drainers that finish and let go: one event per round, with random pauses, so
 * each round lands while the drainers are taking, sending, or just letting go of their slot after
 * draining the previous one. Every request must arrive with neither poll nor rescue.
 */
const raceRoundsAgainstDrainers = <E, R>(round: Effect.Effect<{ readonly _tag: string }, E, R>, space: string) =>
  Effect.gen(function* () {
    const signals = yield* TestWebhooks.signals
    const receiver = yield* WebhookReceiver.start(() => ({ status: 200 }))
    const subs = 4
    for (let k = 0; k < subs; k++) yield* TestWebhooks.subscribe("owner-w", receiver.url(`/w${k}`), [space])
    yield* drainers(signals)
    // One event per round, with random pauses: each round lands while the drainers are taking,
    // sending, or just letting go of their slot after draining the previous one.
    const events = 400
    for (let i = 0; i < events; i++) {
      yield* appendItem(space, { i })
      assert.strictEqual((yield* round)._tag, "Processed")
      const pause = Math.random()
      if (pause < 0.3) yield* Effect.sleep(Duration.millis(Math.floor(pause * 10)))
      else if (pause < 0.6) yield* Effect.yieldNow
    }
    const sql = yield* SqlClient.SqlClient
    const heldSlots = sql<{ n: number }>`
      SELECT count(*)::int AS n FROM webhook_drains WHERE job_id IS NOT NULL`.pipe(Effect.map((rows) => rows[0]!.n))
    // Every request arrived, every delivery is recorded, and every drainer let go of its slot (its
    // job then completes, which signals).
    yield* signals.until(
      Effect.gen(function* () {
        return receiver.log.length >= events * subs && (yield* pendingCount) === 0 && (yield* heldSlots) === 0
      }),
    )
    for (let k = 0; k < subs; k++) {
      const seen = receiver.log.filter((r) => r.path === `/w${k}`).map((r) => numberIn(r.body, "i"))
      assert.deepStrictEqual(
        seen,
        Array.from({ length: events }, (_, i) => i),
        `/w${k}: every event once, in order`,
      )
    }
  }).pipe(Effect.scoped)

layer(Live, { excludeTestServices: true })("Webhook drain", (it) => {
  it.effect(
    "WebhookDrainNoLostWakeup: short rounds racing drainers that finish and let go; every delivery goes out without poll or rescue",
    () => raceRoundsAgainstDrainers(slowRound, "wake"),
    120_000,
  )

  it.effect(
    "WebhookDrainNoLostWakeup, one-statement round: the same race against the round the worker runs",
    () =>
      raceRoundsAgainstDrainers(
        Effect.flatMap(Consumer.makeRound(WebhookFanOut.roundOptions({ batchSize: 10 })), (round) => round),
        "wake-2",
      ),
    120_000,
  )

  it.effect(
    "WebhookDrainDisableEnable: disabling stops a drainer snoozed on a failure; after enabling, a fresh drainer sends",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const webhooks = yield* WebhookSubscriptions
        const signals = yield* TestWebhooks.signals
        let failing = true
        const receiver = yield* WebhookReceiver.start(() => ({ status: failing ? 500 : 200 }))
        const sub = yield* TestWebhooks.subscribe("owner-d", receiver.url("/d"), ["dis"])
        yield* pollingDrainers(signals)
        const append = (n: number) => appendItem("dis", { n })
        yield* append(1)
        yield* append(2)
        yield* TestWebhooks.round()
        // The head fails; its drainer snoozes for an hour, keeping the slot.
        yield* Queue.take(receiver.received).pipe(Effect.timeout("10 seconds"))
        const held = sql<{ jobId: bigint | null }>`
          SELECT job_id AS "jobId" FROM webhook_drains WHERE subscription_id = ${sub.id}::uuid`
        yield* signals.until(
          sql<{ state: string }>`
            SELECT j.state::text FROM jobs AS j JOIN webhook_drains AS w ON w.job_id = j.id
            WHERE w.subscription_id = ${sub.id}::uuid`.pipe(Effect.map(([job]) => job?.state === "scheduled")),
        )

        yield* webhooks.disable(sub.id)
        assert.strictEqual((yield* held)[0]!.jobId, null, "disabling frees the slot")
        assert.strictEqual(yield* pendingCount, 0, "and ends what was pending")
        yield* webhooks.enable(sub.id)
        failing = false
        yield* append(3)
        yield* TestWebhooks.round()
        const ok = yield* Queue.take(receiver.received).pipe(Effect.timeout("10 seconds"))
        assert.deepStrictEqual(
          [ok.status, numberIn(ok.body)],
          [200, 3],
          "only what came after enabling, sent at once, not after the old drainer's hour",
        )
        assert.strictEqual(receiver.log.length, 2, "the failed first attempt, then the new event")
        assert.strictEqual((yield* webhooks.get(sub.id)).state, "active")
      }).pipe(Effect.scoped),
    60_000,
  )

  it.effect(
    "WebhookDrainShutdownRecordsAnswered: a shutdown mid-request records the 2xx already answered; the next run sends the rest in order",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const signals = yield* TestWebhooks.signals
        const hangAt = 6
        let hung = false
        const receiver = yield* WebhookReceiver.start(({ body }) => {
          const n = numberIn(body)
          if (n === hangAt && !hung) {
            hung = true
            return { status: 200, hang: true }
          }
          return { status: 200 }
        })
        const sub = yield* TestWebhooks.subscribe("owner-s", receiver.url("/s"), ["shut"])
        const events = 10
        for (let n = 0; n < events; n++) {
          yield* appendItem("shut", { n })
        }
        yield* TestWebhooks.round()
        const numbers = () => receiver.log.map((r) => numberIn(r.body))

        // The first worker sends up to the request that hangs, and is shut down while it hangs.
        const firstWorker = yield* Scope.make()
        // No grace: the hanging request is interrupted at once.
        yield* pollingDrainers(signals, Duration.zero).pipe(Scope.provide(firstWorker))
        for (let k = 0; k <= hangAt; k++) yield* Queue.take(receiver.received)
        yield* Scope.close(firstWorker, Exit.void)
        const states = yield* sql<{ n: number; state: string }>`
          SELECT (e.payload->>'n')::int AS n, d.state
          FROM webhook_deliveries AS d JOIN event_log AS e ON e.seq = d.event_seq AND ${timeOf(sql, sql`d.event_at`)}
          WHERE d.subscription_id = ${sub.id}::uuid ORDER BY d.event_seq`
        assert.deepStrictEqual(
          states.map((r) => r.state),
          Array.from({ length: events }, (_, n) => (n < hangAt ? "delivered" : "pending")),
          "every answered request is on record, none after it",
        )

        // The next run starts from the first delivery not on record.
        yield* pollingDrainers(signals)
        yield* signals.until(Effect.map(pendingCount, (n) => n === 0))
        assert.deepStrictEqual(
          numbers(),
          [
            ...Array.from({ length: events }, (_, n) => n).slice(0, hangAt + 1),
            ...Array.from({ length: events - hangAt }, (_, k) => hangAt + k),
          ],
          "in order: the unanswered one again, then the rest",
        )
      }).pipe(Effect.scoped),
    60_000,
  )

  it.effect(
    "WebhookBacklogDrainsWithoutLinger: hundreds pending and no NOTIFY after the round; a drainer that would linger an hour without news still sends them all, in order, reading ahead in growing batches",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const signals = yield* TestWebhooks.signals
        const receiver = yield* WebhookReceiver.start(() => ({ status: 200 }))
        const sub = yield* TestWebhooks.subscribe("owner-b", receiver.url("/b"), ["backlog"])
        // More than one run's 500 deliveries, created by one round before any drainer runs: nothing
        // nudges the drainer afterwards.
        const events = 600
        const log = yield* EventLog
        for (let n = 0; n < events; n += 100) {
          yield* log.append(
            Array.from({ length: 100 }, (_, k) => ({
              space: "backlog",
              type: "item.created",
              actor: "tester",
              payload: { n: n + k },
            })),
          )
        }
        yield* TestWebhooks.round()
        let records = 0
        const worker = yield* Scope.make()
        // An hour of linger: a drainer that waits for news after a full read hangs here. The age
        // bound is set far out so that how many heads a read takes does not depend on this
        // machine's speed.
        yield* drainers(signals, Duration.zero, {
          linger: Duration.hours(1),
          permissionMaxAge: Duration.minutes(1),
          onRecorded: () => {
            records++
            return signals.onRecorded()
          },
        }).pipe(Scope.provide(worker))
        const got = yield* Effect.forEach(Array.from({ length: events }), () => Queue.take(receiver.received)).pipe(
          Effect.timeout("60 seconds"),
        )
        assert.deepStrictEqual(
          got.map((r) => numberIn(r.body)),
          Array.from({ length: events }, (_, n) => n),
          "every one once, in order",
        )
        assert.isBelow(records, events / 10, "a record for every read, and reads grew past the first 4 heads")
        // The last answers go on record when the worker stops the lingering drainer.
        yield* Scope.close(worker, Exit.void)
        const [row] = yield* sql<{ delivered: number }>`
          SELECT count(*) FILTER (WHERE state = 'delivered')::int AS delivered FROM webhook_deliveries
          WHERE subscription_id = ${sub.id}::uuid`
        assert.strictEqual(row!.delivered, events)
      }).pipe(Effect.scoped),
    120_000,
  )

  it.effect(
    "WebhookDrainLingerWokenByRound: a drainer that ran dry keeps its slot; the next round wakes it and creates no job",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const signals = yield* TestWebhooks.signals
        const receiver = yield* WebhookReceiver.start(() => ({ status: 200 }))
        const sub = yield* TestWebhooks.subscribe("owner-l", receiver.url("/l"), ["linger"])
        // A linger far longer than the test's wait: only the round's NOTIFY can wake the drainer.
        yield* drainers(signals, Duration.zero, { linger: Duration.minutes(5) })
        const jobs = sql<{ n: number }>`
          SELECT count(*)::int AS n FROM jobs WHERE args->>'subscription' = ${sub.id}`.pipe(
          Effect.map((rows) => rows[0]!.n),
        )
        for (let n = 0; n < 3; n++) {
          yield* appendItem("linger", { n })
          yield* TestWebhooks.round()
          const got = yield* Queue.take(receiver.received).pipe(Effect.timeout("20 seconds"))
          assert.strictEqual(numberIn(got.body), n)
          // The first round created the drainer's job; the later ones found it live, holding the slot.
          assert.strictEqual(yield* jobs, 1, `one job for the subscription after round ${n + 1}`)
        }
      }).pipe(Effect.scoped),
    60_000,
  )
})
