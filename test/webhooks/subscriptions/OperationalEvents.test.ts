/**
 * Operational events: a disable of any cause appends `bothy.subscription.disabled` in the owner's
 * space, in the same transaction as the change, and the owner's own subscription for `bothy.*`
 * gets it like any event (signed, numbered, the right checked); an event about a subscription
 * never reaches that subscription; a rollback leaves neither the change nor the event.
 */
import { assert, layer } from "@effect/vitest"
import { Clock, Duration, Effect, Exit, Layer, Redacted } from "effect"
import { SqlClient } from "effect/sql"
import { TestClock } from "effect/testing"
import { EventLog } from "../../../src/log/EventLog.ts"
import * as WebhookDrainer from "../../../src/webhooks/drain/WebhookDrainer.ts"
import * as OperationalEvents from "../../../src/webhooks/subscriptions/OperationalEvents.ts"
import { disable } from "../../../src/webhooks/subscriptions/SubscriptionStates.ts"
import { WebhookSubscriptions } from "../../../src/webhooks/subscriptions/WebhookSubscriptions.ts"
import * as WebhookStatus from "../../../src/webhooks/WebhookStatus.ts"
import * as WebhookReceiver from "../../../testkit/WebhookReceiver.ts"
import * as TestWebhooks from "../../support/TestWebhooks.ts"

/** Each test's owner is its own: a gap disables every subscription that began before it, of anyone. */
let owner = "ops-owner"
const ownedBy = (name: string) =>
  Effect.sync(() => {
    owner = name
  })

interface OpsEvent {
  readonly seq: bigint
  readonly type: string
  readonly space: string
  readonly actor: string
  readonly payload: Record<string, unknown>
}

/** The operational events about `subscriptionId` in the log, in seq order. */
const eventsAbout = (subscriptionId: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql<OpsEvent>`
      SELECT seq, type, space_id AS space, actor, payload FROM event_log
      WHERE type LIKE 'bothy.%' AND payload->>'subscription' = ${subscriptionId} ORDER BY seq`,
  )

/** The event types of the subscription's deliveries, with what each is about, in seq order. */
const deliveredTypes = (subscriptionId: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql<{ type: string; about: string | null; state: string }>`
      SELECT e.type, e.payload->>'subscription' AS about, d.state
      FROM webhook_deliveries AS d JOIN event_log AS e ON e.seq = d.event_seq
      WHERE d.subscription_id = ${subscriptionId}::uuid ORDER BY d.event_seq`,
  )

/** The owner's subscription to its operational events: its own principal as scope, `bothy.*`. */
const opsSubscription = (url: string) => TestWebhooks.subscribe(owner, url, [owner], ["bothy.*"])

const state = (id: string) =>
  Effect.flatMap(WebhookSubscriptions, (w) => Effect.map(w.get(id), (s) => [s.state, s.disabledCause] as const))

/** The one disabled event about `id`, checked for its type, space, actor and cause. */
const disabledEventOf = (id: string, cause: string) =>
  Effect.gen(function* () {
    const events = yield* eventsAbout(id)
    assert.deepStrictEqual(
      events.map((e) => [e.type, e.space, e.actor, e.payload.cause]),
      [[OperationalEvents.subscriptionDisabled, owner, "bothy", cause]],
    )
    assert.strictEqual(events[0]!.payload.owner, owner)
    return events[0]!
  })

/** After a round, the owner's ops subscription holds a delivery of the event, the subject none. */
const routedToOwner = (ops: string, subject: string) =>
  Effect.gen(function* () {
    yield* TestWebhooks.round()
    const toOps = yield* deliveredTypes(ops)
    assert.deepStrictEqual(
      toOps.map((d) => [d.type, d.about]),
      [[OperationalEvents.subscriptionDisabled, subject]],
    )
    const toSubject = yield* deliveredTypes(subject)
    assert.isFalse(
      toSubject.some((d) => d.type.startsWith(OperationalEvents.prefix)),
      "never to the subscription it is about",
    )
  })

layer(TestWebhooks.layer(), { excludeTestServices: true })("operational events", (it) => {
  it.effect(
    "OperationalEventOnDisable (manual): one bothy.subscription.disabled in the owner's space, delivered signed to the owner's bothy.* subscription",
    () =>
      Effect.gen(function* () {
        yield* ownedBy("ops-manual-owner")
        const signatures: Array<WebhookReceiver.Signature> = []
        const receiver = yield* WebhookReceiver.start((r) => {
          signatures.push(r.signature)
          return { status: 200 }
        })
        const subject = yield* TestWebhooks.subscribe(owner, receiver.url("/manual"), ["ops-manual"])
        const ops = yield* opsSubscription(receiver.url("/ops"))
        receiver.trust("/ops", Redacted.value(ops.secret))
        yield* (yield* WebhookSubscriptions).disable(subject.id)
        const event = yield* disabledEventOf(subject.id, "manual")
        assert.deepStrictEqual(event.payload, {
          subscription: subject.id,
          owner,
          cause: "manual",
          deliveriesEnded: 0,
          failingSince: null,
          lastStatus: null,
          lastError: null,
        })
        yield* routedToOwner(ops.id, subject.id)
        const signals = yield* TestWebhooks.signals
        yield* TestWebhooks.startDrainers(signals)
        yield* signals.until(Effect.map(deliveredTypes(ops.id), (rows) => rows.every((d) => d.state === "delivered")))
        assert.strictEqual(receiver.log.length, 1)
        const envelope = JSON.parse(receiver.log[0]!.body) as Record<string, unknown>
        assert.strictEqual(envelope.type, OperationalEvents.subscriptionDisabled)
        assert.strictEqual(envelope.space, owner)
        assert.strictEqual(envelope.sequence, 1)
        assert.deepStrictEqual(envelope.data, event.payload)
        assert.deepStrictEqual(signatures[0]?.valid, true, "signed with the ops subscription's secret")
      }).pipe(Effect.scoped),
  )

  it.effect("OperationalEventOnDisable (gone): a 410 disables, and the event carries the status", () =>
    Effect.gen(function* () {
      yield* ownedBy("ops-gone-owner")
      const receiver = yield* WebhookReceiver.start((r) => ({ status: r.path === "/gone" ? 410 : 200 }))
      const subject = yield* TestWebhooks.subscribe(owner, receiver.url("/gone"), ["ops-gone"])
      const ops = yield* opsSubscription(receiver.url("/ops"))
      yield* TestWebhooks.append("ops-gone")
      yield* TestWebhooks.append("ops-gone")
      yield* TestWebhooks.round()
      const signals = yield* TestWebhooks.signals
      yield* TestWebhooks.startDrainers(signals)
      yield* signals.until(Effect.map(state(subject.id), ([s]) => s === "disabled"))
      assert.deepStrictEqual(yield* state(subject.id), ["disabled", "gone"])
      const event = yield* disabledEventOf(subject.id, "gone")
      assert.strictEqual(event.payload.lastStatus, 410)
      assert.strictEqual(event.payload.deliveriesEnded, 2, "both pending deliveries ended, the one answered 410 too")
      yield* routedToOwner(ops.id, subject.id)
    }).pipe(Effect.scoped),
  )

  it.effect("OperationalEventOnDisable (gap): the round's loss handler appends it inside the round", () =>
    Effect.gen(function* () {
      yield* ownedBy("ops-gap-owner")
      const sql = yield* SqlClient.SqlClient
      const receiver = yield* WebhookReceiver.start(() => ({ status: 200 }))
      const subject = yield* TestWebhooks.subscribe(owner, receiver.url("/gap"), ["ops-gap"])
      const first = yield* TestWebhooks.append("ops-gap")
      const last = yield* TestWebhooks.append("ops-gap")
      // Begun at the range's end: not disabled by it.
      const ops = yield* opsSubscription(receiver.url("/ops"))
      // Retention removed them before the consumer read them.
      yield* sql`DELETE FROM event_log WHERE seq BETWEEN ${first.lastSeq} AND ${last.lastSeq}`
      const outcome = yield* TestWebhooks.round()
      assert.strictEqual(outcome._tag, "Processed")
      assert.deepStrictEqual(yield* state(subject.id), ["disabled", "gap"])
      const event = yield* disabledEventOf(subject.id, "gap")
      assert.isTrue(event.seq > last.lastSeq, "appended after the lost range, in the round's transaction")
      assert.deepStrictEqual(yield* state(ops.id), ["active", null])
      yield* routedToOwner(ops.id, subject.id)
    }).pipe(Effect.scoped),
  )

  it.effect(
    "OperationalEventNeverToItself: an event about a subscription reaches the owner's other subscriptions, never that one, through the round and a re-enabling",
    () =>
      Effect.gen(function* () {
        yield* ownedBy("ops-self-owner")
        const receiver = yield* WebhookReceiver.start(() => ({ status: 200 }))
        const webhooks = yield* WebhookSubscriptions
        // `everything` takes every type in the owner's space: the operational events about others included.
        const everything = yield* TestWebhooks.subscribe(owner, receiver.url("/all"), [owner])
        const other = yield* TestWebhooks.subscribe(owner, receiver.url("/other"), ["ops-other"])
        const ops = yield* opsSubscription(receiver.url("/ops"))
        yield* webhooks.disable(other.id)
        yield* webhooks.disable(everything.id)
        const aboutEverything = (yield* eventsAbout(everything.id))[0]!
        // Re-enabled from the first of them: the re-enabling matches the log's events in SQL too.
        const aboutOther = (yield* eventsAbout(other.id))[0]!
        yield* webhooks.enable(everything.id, { fromSeq: aboutOther.seq })
        yield* TestWebhooks.round()
        assert.deepStrictEqual(
          (yield* deliveredTypes(everything.id)).map((d) => d.about),
          [other.id],
          "the event about the other subscription, not the one about itself",
        )
        assert.deepStrictEqual(
          (yield* deliveredTypes(ops.id)).map((d) => d.about),
          [other.id, everything.id],
        )
        // And through the round: disabled again, its event is matched while it is active again.
        yield* webhooks.enable(everything.id)
        yield* webhooks.disable(ops.id)
        yield* TestWebhooks.round()
        const types = yield* deliveredTypes(everything.id)
        assert.deepStrictEqual(
          types.map((d) => d.about),
          [other.id, ops.id],
        )
        assert.isTrue((yield* eventsAbout(ops.id))[0]!.seq > aboutEverything.seq)
      }).pipe(Effect.scoped),
  )

  it.effect(
    "OperationalEventCommitsWithStateChange: in both sequencing modes the disable and its event commit together, and a rollback leaves neither",
    () =>
      Effect.gen(function* () {
        yield* ownedBy("ops-commit-owner")
        const sql = yield* SqlClient.SqlClient
        const receiver = yield* WebhookReceiver.start(() => ({ status: 200 }))
        const pendingAbout = (id: string) =>
          Effect.map(
            sql<{ n: number }>`
              SELECT count(*)::int AS n FROM event_log_pending AS p, jsonb_array_elements(p.events) AS e
              WHERE e->>'t' = ${OperationalEvents.subscriptionDisabled} AND (e->>'p')::jsonb->>'subscription' = ${id}`,
            (rows) => rows[0]!.n,
          )
        for (const mode of ["counter", "post_commit"] as const) {
          const log = mode === "counter" ? EventLog.layer : EventLog.layerPostCommit
          const sub = yield* TestWebhooks.subscribe(owner, receiver.url(`/${mode}`), [`ops-${mode}`])
          const inTransaction = (after: Effect.Effect<void, string>) =>
            sql
              .withTransaction(Effect.andThen(disable([sub.id], "manual"), after))
              .pipe(Effect.provide(log.pipe(Layer.provide(Layer.succeed(SqlClient.SqlClient, sql)))), Effect.exit)
          const failed = yield* inTransaction(Effect.fail("the caller's transaction fails after the disable"))
          assert.isTrue(Exit.isFailure(failed))
          assert.deepStrictEqual(yield* state(sub.id), ["active", null], `${mode}: the change rolled back`)
          assert.deepStrictEqual(yield* eventsAbout(sub.id), [], `${mode}: no event`)
          assert.strictEqual(yield* pendingAbout(sub.id), 0, `${mode}: no append waiting either`)
          const committed = yield* inTransaction(Effect.void)
          assert.isTrue(Exit.isSuccess(committed))
          assert.deepStrictEqual(yield* state(sub.id), ["disabled", "manual"])
          const appended = (yield* eventsAbout(sub.id)).length + (yield* pendingAbout(sub.id))
          assert.strictEqual(appended, 1, `${mode}: exactly one event, numbered or waiting for the sequencer`)
        }
      }).pipe(Effect.scoped),
  )
})

const health = { failureRate: 0.5, window: Duration.minutes(15), minAttempts: 3 }

layer(TestWebhooks.layer({ health }), { excludeTestServices: true })("operational events under the TestClock", (it) => {
  /** The subscription's drain job, run once by hand as the job runtime would: its snooze, or undefined when done. */
  const drainOnce = (id: string) =>
    Effect.gen(function* () {
      const kind = yield* WebhookDrainer.makeWith({ linger: 0 })
      const info = yield* TestWebhooks.drainJob(id)
      return yield* kind.run({ subscription: id }, info).pipe(
        Effect.as(undefined),
        Effect.catchTag("JobSnooze", (snooze) => Effect.succeed(snooze.delay)),
      )
    })

  it.effect(
    "OperationalEventOnDisable (failing): failing for 5 days disables, with when the failing began and the last status",
    () =>
      Effect.gen(function* () {
        yield* ownedBy("ops-failing-owner")
        yield* TestClock.setTime(Date.now())
        const receiver = yield* WebhookReceiver.start(() => ({ status: 503 }))
        const subject = yield* TestWebhooks.subscribe(owner, receiver.url("/failing"), ["ops-failing"])
        const ops = yield* opsSubscription(receiver.url("/ops"))
        yield* TestWebhooks.append("ops-failing")
        yield* TestWebhooks.round()
        const start = yield* Clock.currentTimeMillis
        for (;;) {
          const delay = yield* drainOnce(subject.id)
          if (delay === undefined) break
          yield* TestClock.adjust(delay)
        }
        assert.deepStrictEqual(yield* state(subject.id), ["disabled", "failing"])
        assert.isAtLeast((yield* Clock.currentTimeMillis) - start, 5 * 24 * 3_600_000)
        const events = yield* eventsAbout(subject.id)
        const disabled = events.filter((e) => e.type === OperationalEvents.subscriptionDisabled)
        assert.strictEqual(disabled.length, 1)
        assert.strictEqual(disabled[0]!.payload.cause, "failing")
        assert.strictEqual(disabled[0]!.payload.lastStatus, 503)
        assert.strictEqual(new Date(disabled[0]!.payload.failingSince as string).getTime(), start)
        assert.strictEqual(disabled[0]!.payload.deliveriesEnded, 1)
        // Every attempt failed: it was degraded first (its flag cleared by the disable).
        assert.deepStrictEqual(
          events.map((e) => e.type),
          [OperationalEvents.subscriptionDegraded, OperationalEvents.subscriptionDisabled],
        )
        assert.isNull((yield* (yield* WebhookSubscriptions).get(subject.id)).degradedSince)
        yield* TestWebhooks.round()
        assert.deepStrictEqual(
          (yield* deliveredTypes(ops.id)).map((d) => d.type),
          [OperationalEvents.subscriptionDegraded, OperationalEvents.subscriptionDisabled],
        )
        assert.isFalse((yield* deliveredTypes(subject.id)).some((d) => d.type.startsWith("bothy.")))
      }).pipe(Effect.scoped, Effect.provide(TestClock.layer())),
    60_000,
  )

  it.effect(
    "SubscriptionDegradesAndRecovers: above 50 % failed over the window (3 attempts at least) it is degraded and still delivers; below it, recovered; with TestClock",
    () =>
      Effect.gen(function* () {
        yield* ownedBy("ops-flaky-owner")
        yield* TestClock.setTime(Date.now())
        let status = 500
        const receiver = yield* WebhookReceiver.start((r) => ({ status: r.path === "/flaky" ? status : 200 }))
        const webhooks = yield* WebhookSubscriptions
        // Its scope holds the owner's space and it takes every type: its own events would reach it.
        const flaky = yield* TestWebhooks.subscribe(owner, receiver.url("/flaky"), ["ops-flaky", owner])
        const ops = yield* opsSubscription(receiver.url("/ops"))
        yield* TestWebhooks.append("ops-flaky")
        yield* TestWebhooks.round()

        // Two failures: below the minimum of attempts, not degraded.
        yield* TestClock.adjust((yield* drainOnce(flaky.id))!)
        yield* TestClock.adjust((yield* drainOnce(flaky.id))!)
        assert.isNull((yield* webhooks.get(flaky.id)).degradedSince)
        assert.deepStrictEqual(yield* eventsAbout(flaky.id), [])
        // The third: 3 of 3 failed.
        const degradedAt = yield* Clock.currentTimeMillis
        yield* drainOnce(flaky.id)
        const degraded = yield* webhooks.get(flaky.id)
        assert.strictEqual(degraded.state, "active", "degraded is a flag: it still delivers")
        assert.strictEqual(degraded.degradedSince?.getTime(), degradedAt)
        // What the status page and bothy status show: the group's count, the subscription listed as degraded.
        const sql = yield* SqlClient.SqlClient
        const active = (yield* WebhookStatus.groups(sql)).find((g) => g.state === "active")
        assert.strictEqual(active?.degraded, 1)
        const listed = (yield* WebhookStatus.subscriptionList(50)).find((l) => l.id === flaky.id)
        assert.strictEqual(listed?.degradedSince?.getTime(), degradedAt)
        const [event] = yield* eventsAbout(flaky.id)
        assert.strictEqual(event!.type, OperationalEvents.subscriptionDegraded)
        assert.strictEqual(event!.space, owner)
        assert.deepStrictEqual(event!.payload, {
          subscription: flaky.id,
          owner,
          failureRate: 1,
          attempts: 3,
          failures: 3,
          windowSeconds: 900,
          threshold: 0.5,
          lastStatus: 500,
        })

        // The endpoint is back (run before its retry delay is up): 3 failed of 4 within the window, still degraded.
        status = 200
        yield* TestClock.adjust(Duration.seconds(10))
        assert.isUndefined(yield* drainOnce(flaky.id), "delivered while degraded")
        assert.isNotNull((yield* webhooks.get(flaky.id)).degradedSince)

        // Half an hour on, the failures are out of both buckets of the window: the next success recovers it.
        yield* TestClock.adjust(Duration.minutes(30))
        yield* TestWebhooks.append("ops-flaky")
        yield* TestWebhooks.round()
        assert.isUndefined(yield* drainOnce(flaky.id))
        assert.isNull((yield* webhooks.get(flaky.id)).degradedSince)
        const events = yield* eventsAbout(flaky.id)
        assert.deepStrictEqual(
          events.map((e) => e.type),
          [OperationalEvents.subscriptionDegraded, OperationalEvents.subscriptionRecovered],
        )
        assert.strictEqual(events[1]!.payload.failures, 0)
        assert.strictEqual(events[1]!.payload.lastStatus, 200)

        // The owner's bothy.* subscription gets both; the flaky one, whose scope holds the
        // owner's space, gets neither: they are about it.
        yield* TestWebhooks.round()
        assert.deepStrictEqual(
          (yield* deliveredTypes(ops.id)).map((d) => d.type),
          [OperationalEvents.subscriptionDegraded, OperationalEvents.subscriptionRecovered],
        )
        assert.deepStrictEqual(
          (yield* deliveredTypes(flaky.id)).map((d) => d.type),
          ["item.created", "item.created"],
        )
      }).pipe(Effect.scoped, Effect.provide(TestClock.layer())),
    60_000,
  )
})
