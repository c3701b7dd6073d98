import { assert, layer } from "@effect/vitest"
import { Duration, Effect, Exit, Fiber, Layer, Queue, Redacted } from "effect"
import { SqlClient } from "effect/sql"
import { Webhook } from "standardwebhooks"
import * as PermissionGrants from "../../../src/authz/PermissionGrants.ts"
import { Permissions, type PermissionsShape, webhookDeliver } from "../../../src/authz/Permissions.ts"
import * as JobWorker from "../../../src/jobs/JobWorker.ts"
import * as WebhookDrainer from "../../../src/webhooks/drain/WebhookDrainer.ts"
import { WebhookSubscriptions } from "../../../src/webhooks/subscriptions/WebhookSubscriptions.ts"
import * as WebhookFanOut from "../../../src/webhooks/WebhookFanOut.ts"
import * as WebhookReceiver from "../../../testkit/WebhookReceiver.ts"
import * as TestWebhooks from "../../support/TestWebhooks.ts"

// A failed delivery comes back after 10 ms (the worker's 50 ms poll brings it back).
const Live = TestWebhooks.layer({ retrySteps: [Duration.millis(10)], pool: { maxConnections: 16 } })

interface Envelope {
  readonly sequence: number
  readonly space: string
  readonly data: { readonly i: number }
}

const envelope = (r: WebhookReceiver.Received) => JSON.parse(r.body) as Envelope

/**
 * The two ways a host gives rights: as SQL the drainer reads with its heads (numbered in the same
 * statement), or only as a call (`allowedEach` after the read, numbered in one more statement).
 */
const hosts: ReadonlyArray<{
  readonly name: string
  readonly permissions: Effect.Effect<PermissionsShape, never, Permissions>
}> = [
  {
    name: "rights in SQL",
    permissions: Effect.gen(function* () {
      return yield* Permissions
    }),
  },
  {
    name: "rights by call",
    permissions: Effect.gen(function* () {
      const grants = yield* Permissions
      return Permissions.make({ allowed: grants.allowed })
    }),
  },
]

/** Drain jobs for the rest of the test's scope, with the host's `Permissions`. */
const startDrainers = (
  permissions: Effect.Effect<PermissionsShape, never, Permissions>,
  signals: TestWebhooks.Signals,
  options: WebhookDrainer.DrainOptions = {},
) =>
  Effect.gen(function* () {
    const kind = yield* WebhookDrainer.makeWith({ ...options, onRecorded: signals.onRecorded }).pipe(
      Effect.provideService(Permissions, yield* permissions),
    )
    yield* Layer.build(
      JobWorker.layer({
        kinds: [kind],
        queues: { webhooks: { concurrency: 8 } },
        pollInterval: "50 millis",
        onFinalized: signals.onFinalized,
      }),
    )
  })

const { deliveries } = TestWebhooks

const nonePending = (subscriptionId: string) =>
  Effect.map(deliveries(subscriptionId), (rows) => rows.every((d) => d.state !== "pending"))

const append = (space: string, i: number) => TestWebhooks.append(space, { i })

layer(Live, { excludeTestServices: true })("Webhook sequence", (it) => {
  for (const host of hosts) {
    it.effect(
      `WebhookSequenceSkipsSuppressed (${host.name}): the receiver's sequences are exactly 1..K for the K deliveries it got, with revocations in between`,
      () =>
        Effect.gen(function* () {
          const sql = yield* SqlClient.SqlClient
          const webhooks = yield* WebhookSubscriptions
          const signals = yield* TestWebhooks.signals
          // One request in five fails (every fifth, so some do however few go out): its drainer
          // gives back what it read ahead and retries.
          let requests = 0
          const receiver = yield* WebhookReceiver.start(() => ({ status: ++requests % 5 === 0 ? 500 : 200 }))
          const owner = `owner-q-${host.name}`
          const spaces = ["a", "b", "c"].map((s) => `q-${s}-${host.name}`)
          const sub = yield* TestWebhooks.subscribe(owner, receiver.url("/q"), spaces)
          let i = 0

          // Dead before anything was sent: disabled with three pending, enabled again.
          for (let k = 0; k < 3; k++) yield* append(spaces[0]!, i++)
          yield* TestWebhooks.round()
          yield* webhooks.disable(sub.id)
          yield* webhooks.enable(sub.id)

          yield* Layer.build(WebhookFanOut.layer({ batchSize: 50, pollInterval: "100 millis" }))
          yield* startDrainers(host.permissions, signals)

          // Events in random spaces; between them rights are revoked and granted again, and a space
          // leaves the scope and comes back, while the drainer reads ahead, fails and retries.
          for (let round = 0; round < 30; round++) {
            for (let k = 0; k < 8; k++) yield* append(spaces[Math.floor(Math.random() * 3)]!, i++)
            const space = spaces[Math.floor(Math.random() * 3)]!
            const change = Math.random()
            if (change < 0.35) yield* PermissionGrants.revoke(owner, webhookDeliver, space)
            else if (change < 0.7) yield* PermissionGrants.grant(owner, webhookDeliver, space)
            else if (change < 0.85) {
              yield* sql`DELETE FROM webhook_subscription_spaces WHERE subscription_id = ${sub.id}::uuid AND space_id = ${space}`
            } else {
              yield* sql`
                INSERT INTO webhook_subscription_spaces (space_id, subscription_id) VALUES (${space}, ${sub.id}::uuid)
                ON CONFLICT DO NOTHING`
            }
            if (Math.random() < 0.5) yield* Effect.yieldNow
          }
          // However the random changes fell, some deliveries lose their right: space b revoked
          // before its events are appended, and granted again only once an event after them went
          // out (in seq order, so they were settled first, without a number).
          yield* PermissionGrants.revoke(owner, webhookDeliver, spaces[1]!)
          yield* sql`
            INSERT INTO webhook_subscription_spaces (space_id, subscription_id)
            VALUES (${spaces[0]!}, ${sub.id}::uuid), (${spaces[1]!}, ${sub.id}::uuid) ON CONFLICT DO NOTHING`
          yield* PermissionGrants.grant(owner, webhookDeliver, spaces[0]!)
          for (let k = 0; k < 3; k++) yield* append(spaces[1]!, i++)
          const marker = i
          yield* append(spaces[0]!, i++)
          yield* signals.until(
            Effect.map(deliveries(sub.id), (rows) => rows.some((d) => d.i === marker && d.state !== "pending")),
          )
          // Everything back in place, then one last event: once it is delivered and nothing is
          // pending, every delivery before it is settled (they go in seq order).
          for (const space of spaces) {
            yield* PermissionGrants.grant(owner, webhookDeliver, space)
            yield* sql`
              INSERT INTO webhook_subscription_spaces (space_id, subscription_id) VALUES (${space}, ${sub.id}::uuid)
              ON CONFLICT DO NOTHING`
          }
          const last = i
          yield* append(spaces[0]!, last)
          yield* signals.until(
            Effect.map(
              deliveries(sub.id),
              (rows) => rows.every((d) => d.state !== "pending") && rows.at(-1)?.i === last,
            ),
          )

          const rows = yield* deliveries(sub.id)
          const delivered = rows.filter((d) => d.state === "delivered")
          const ok = receiver.log.filter((r) => r.status === 200)
          assert.deepStrictEqual(
            ok.map((r) => envelope(r).data.i),
            delivered.map((d) => d.i),
            "what the receiver got is what is on record as delivered, in order",
          )
          assert.deepStrictEqual(
            ok.map((r) => BigInt(envelope(r).sequence)),
            delivered.map((d) => d.sequence),
            "under the numbers on record",
          )
          // A delivery that went out, failed and then lost its right keeps the number the receiver
          // saw (with its 500); one that never went out holds none. So the numbers the receiver saw
          // are exactly 1..K, and every gap between its 2xx ones is such a failed, suppressed one.
          const seen = [...new Set(receiver.log.map((r) => envelope(r).sequence))].sort((a, b) => a - b)
          assert.deepStrictEqual(
            seen,
            seen.map((_, n) => n + 1),
            "the receiver saw 1..K, each number on one event",
          )
          const dead = rows.filter((d) => d.state === "dead")
          assert.deepStrictEqual(
            dead.filter((d) => d.sequence !== null).map((d) => d.attempts > 0),
            dead.filter((d) => d.sequence !== null).map(() => true),
            "a dead delivery holds a number only if it went out",
          )
          assert.strictEqual(
            delivered.length + dead.filter((d) => d.sequence !== null).length,
            seen.length,
            "every number is on a delivery that went out",
          )
          assert.strictEqual((yield* webhooks.get(sub.id)).lastSequence, BigInt(seen.length), "the counter ends at K")
          const reasons = new Set(rows.filter((d) => d.state === "dead").map((d) => d.deadReason))
          assert.isTrue(reasons.has("permission"), "some were suppressed for the right")
          assert.isTrue(reasons.has("disabled:manual"), "some ended dead before anything was sent")
          assert.isAbove(receiver.log.length, ok.length, "some requests failed and were retried")
          // Every attempt verifies, and a retry carries the webhook-id of its event only.
          const verifier = new Webhook(Redacted.value(sub.secret))
          const eventOf = new Map<string, number>()
          for (const r of receiver.log) {
            verifier.verify(r.body, r.headers as Record<string, string>)
            const id = String(r.headers["webhook-id"])
            assert.strictEqual(eventOf.get(id) ?? envelope(r).data.i, envelope(r).data.i, `${id}: one event`)
            eventOf.set(id, envelope(r).data.i)
          }
        }).pipe(Effect.scoped),
      120_000,
    )

    it.effect(
      `DeliveryRightFreshAtSend (${host.name}): an endpoint that takes 2 s per request, four deliveries read ahead, the grant revoked during the first request: none of the other three is sent`,
      () =>
        Effect.gen(function* () {
          const signals = yield* TestWebhooks.signals
          let revoked: () => void = () => {}
          const afterRevoking = new Promise<void>((resolve) => {
            revoked = resolve
          })
          let requests = 0
          const receiver = yield* WebhookReceiver.start(() => {
            requests++
            // The first request takes 2 s, and in any case ends only after the test revoked the grant.
            return requests === 1
              ? { status: 200, after: Promise.all([new Promise((r) => setTimeout(r, 2000)), afterRevoking]) }
              : { status: 200 }
          })
          const owner = `owner-f-${host.name}`
          const space = `f-${host.name}`
          const sub = yield* TestWebhooks.subscribe(owner, receiver.url("/f"), [space])
          for (let n = 0; n < 4; n++) yield* append(space, n)
          yield* TestWebhooks.round()
          yield* startDrainers(host.permissions, signals, { readAhead: 4 })

          const first = yield* Queue.take(receiver.received)
          assert.strictEqual(envelope(first).data.i, 0)
          yield* PermissionGrants.revoke(owner, webhookDeliver, space)
          revoked()
          yield* signals.until(nonePending(sub.id))
          assert.strictEqual(receiver.log.length, 1, "only the first request went out")
          assert.deepStrictEqual(
            (yield* deliveries(sub.id)).map((d) => [d.state, d.deadReason, d.sequence]),
            [
              ["delivered", null, 1n],
              ["dead", "permission", null],
              ["dead", "permission", null],
              ["dead", "permission", null],
            ],
            "the three read ahead were checked again before their requests, and gave their numbers back",
          )

          // The next delivery the receiver gets is number 2: the numbers of the three came back.
          yield* PermissionGrants.grant(owner, webhookDeliver, space)
          yield* append(space, 4)
          yield* TestWebhooks.round()
          const next = yield* Queue.take(receiver.received)
          assert.deepStrictEqual([envelope(next).data.i, envelope(next).sequence], [4, 2])
          new Webhook(Redacted.value(sub.secret)).verify(next.body, next.headers as Record<string, string>)
        }).pipe(Effect.scoped),
      60_000,
    )

    it.effect(
      `WebhookNumbersFollowSeqAfterStop (${host.name}): a run that stops between reading a denied delivery and settling it numbers nothing behind it; granted again, the receiver gets both in seq order as 1 and 2`,
      () =>
        Effect.gen(function* () {
          const sql = yield* SqlClient.SqlClient
          const receiver = yield* WebhookReceiver.start(() => ({ status: 200 }))
          const owner = `owner-stop-${host.name}`
          const spaces = [`stop-a-${host.name}`, `stop-b-${host.name}`]
          const sub = yield* TestWebhooks.subscribe(owner, receiver.url("/stop"), spaces)
          yield* PermissionGrants.revoke(owner, webhookDeliver, spaces[0]!)
          yield* append(spaces[0]!, 0)
          yield* append(spaces[1]!, 1)
          yield* TestWebhooks.round()
          // The run stops where a crash stops it: its suppression of the denied delivery fails,
          // and so does any give-back of numbers it handed out.
          yield* Effect.acquireRelease(
            sql`
              CREATE FUNCTION stop_here() RETURNS trigger LANGUAGE plpgsql AS $$
              BEGIN RAISE EXCEPTION 'the worker is gone'; END $$`,
            () => Effect.ignore(sql`DROP FUNCTION IF EXISTS stop_here() CASCADE`),
          )
          yield* sql`
            CREATE TRIGGER no_suppression BEFORE UPDATE ON webhook_deliveries
            FOR EACH ROW WHEN (NEW.dead_reason = 'permission') EXECUTE FUNCTION stop_here()`
          yield* sql`
            CREATE TRIGGER no_give_back BEFORE UPDATE ON webhook_subscriptions
            FOR EACH ROW WHEN (NEW.last_sequence < OLD.last_sequence) EXECUTE FUNCTION stop_here()`
          const kind = yield* WebhookDrainer.makeWith({ linger: 0 }).pipe(
            Effect.provideService(Permissions, yield* host.permissions),
          )
          const info = yield* TestWebhooks.drainJob(sub.id)
          const stopped = yield* kind.run({ subscription: sub.id }, info).pipe(Effect.scoped, Effect.exit)
          assert.isTrue(Exit.isFailure(stopped), "the run stopped on the failed suppression")
          assert.deepStrictEqual(
            (yield* deliveries(sub.id)).map((d) => [d.i, d.state, d.sequence]),
            [
              [0, "pending", null],
              [1, "pending", null],
            ],
            "nothing behind the denied delivery was numbered",
          )

          yield* sql`DROP FUNCTION stop_here() CASCADE`
          yield* PermissionGrants.grant(owner, webhookDeliver, spaces[0]!)
          // The job runs again as a rescue would run it: its next attempt.
          yield* kind.run({ subscription: sub.id }, { ...info, attempt: info.attempt + 1 }).pipe(Effect.scoped)
          assert.deepStrictEqual(
            receiver.log.map((r) => [envelope(r).data.i, envelope(r).sequence]),
            [
              [0, 1],
              [1, 2],
            ],
            "in seq order, numbered in that order",
          )
        }).pipe(Effect.scoped),
      60_000,
    )
  }

  it.effect(
    "WebhookNumbersNeverShared: two runs of one drain job at once (a worker that lost its lease runs on) never send two events under one webhook-id",
    () =>
      Effect.gen(function* () {
        const signals = yield* TestWebhooks.signals
        // Answers take up to 20 ms, so one copy's numbered heads wait while the other reads them.
        const receiver = yield* WebhookReceiver.start(() => ({
          status: Math.random() < 0.25 ? 500 : 200,
          after: new Promise((r) => setTimeout(r, Math.random() * 20)),
        }))
        const owner = "owner-twin"
        const spaces = ["twin-a", "twin-b"]
        const sub = yield* TestWebhooks.subscribe(owner, receiver.url("/twin"), spaces)
        for (let i = 0; i < 400; i++) yield* append(spaces[i % 2]!, i)
        yield* TestWebhooks.round()
        // Two copies of the same job, each run again as its snoozes end, while rights come and go:
        // reads ahead, give-backs and renumberings of the two interleave.
        const info = yield* TestWebhooks.drainJob(sub.id)
        const kind = yield* WebhookDrainer.makeWith({ linger: 0, onRecorded: signals.onRecorded })
        // Each copy runs again at once whenever it stops (a snooze, a release), until nothing is pending.
        const twin = Effect.gen(function* () {
          while (!(yield* nonePending(sub.id))) {
            // A failed statement ends a run (the two record the same attempt of a delivery, say);
            // the job runtime would run it again, and so does this loop.
            yield* kind.run({ subscription: sub.id }, info).pipe(Effect.catch(() => Effect.void))
          }
        }).pipe(Effect.forkScoped)
        yield* twin
        yield* twin
        // Rights flip all along, so a head one copy read and numbered is often denied when the
        // other reads it again: the give-backs and renumberings that could hand a sent number on.
        let flipping = true
        yield* Effect.gen(function* () {
          for (let k = 0; flipping; k++) {
            const space = spaces[k % 2]!
            yield* PermissionGrants.revoke(owner, webhookDeliver, space)
            yield* PermissionGrants.grant(owner, webhookDeliver, space)
          }
        }).pipe(Effect.forkScoped)
        yield* signals.until(nonePending(sub.id))
        flipping = false

        const eventsById = new Map<string, Set<number>>()
        for (const r of receiver.log) {
          const id = String(r.headers["webhook-id"])
          eventsById.set(id, (eventsById.get(id) ?? new Set()).add(envelope(r).data.i))
        }
        const shared = [...eventsById].filter(([, events]) => events.size > 1)
        assert.deepStrictEqual(shared, [], "no webhook-id carried two events")
        const rows = yield* deliveries(sub.id)
        const numbers = rows.flatMap((d) => (d.sequence === null ? [] : [d.sequence]))
        assert.strictEqual(new Set(numbers).size, numbers.length, "no number on two deliveries")
        assert.isTrue(
          rows.filter((d) => d.state === "delivered").every((d) => d.sequence !== null),
          "every delivered one went out under its number",
        )
      }).pipe(Effect.scoped),
    120_000,
  )

  it.effect(
    "WebhookStaleDrainRunStops: a drain run whose job was rescued and claimed again (a later attempt) sends nothing more beside the new run; the new run delivers the rest in order, once each",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        let hold: () => void = () => {}
        const held = new Promise<void>((resolve) => {
          hold = resolve
        })
        let first = true
        const receiver = yield* WebhookReceiver.start(() => {
          const after = first ? held : undefined
          first = false
          return { status: 200, ...(after === undefined ? {} : { after }) }
        })
        const sub = yield* TestWebhooks.subscribe("owner-stale", receiver.url("/stale"), ["stale-a"])
        for (let i = 0; i < 12; i++) yield* append("stale-a", i)
        yield* TestWebhooks.round()
        const info = yield* TestWebhooks.drainJob(sub.id)
        const kind = yield* WebhookDrainer.makeWith({ linger: 0, readAhead: 1, maxReadAhead: 1 })
        const stale = yield* kind.run({ subscription: sub.id }, info).pipe(Effect.forkScoped)
        yield* Queue.take(receiver.received)
        // What a rescue and a claim elsewhere do to the job row while this run waits on its request.
        yield* sql`UPDATE jobs SET attempt = ${info.attempt + 1} WHERE id = ${info.id}`
        hold()
        yield* Fiber.await(stale)
        const sentByStale = receiver.log.length
        assert.isAtMost(sentByStale, 2, "at most what it had in hand when its job moved on")
        assert.isFalse(yield* nonePending(sub.id), "the rest is left to the newer run")

        yield* kind.run({ subscription: sub.id }, { ...info, attempt: info.attempt + 1 })
        assert.isTrue(yield* nonePending(sub.id))
        const arrived = receiver.log.map((r) => envelope(r).data.i)
        assert.deepStrictEqual(
          arrived,
          Array.from({ length: 12 }, (_, i) => i),
          "each once, in seq order",
        )
      }).pipe(Effect.scoped),
    60_000,
  )
})
