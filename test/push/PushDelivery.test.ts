import { assert, layer } from "@effect/vitest"
import { Duration, Effect, Metric, Queue, type Schema } from "effect"
import { SqlClient } from "effect/sql"
import { TestClock } from "effect/testing"
import * as PermissionGrants from "../../src/authz/PermissionGrants.ts"
import { pushDeliver } from "../../src/authz/Permissions.ts"
import type { Reported } from "../../src/jobs/JobCompleter.ts"
import { EventLog } from "../../src/log/EventLog.ts"
import * as PushAudience from "../../src/push/PushAudience.ts"
import * as PushMessageKey from "../../src/push/PushMessageKey.ts"
import * as PushMetrics from "../../src/push/PushMetrics.ts"
import * as PushService from "../../testkit/PushService.ts"
import * as TestPush from "../support/TestPush.ts"
import { member, outcomes, startWorker } from "../support/TestPushWorker.ts"

const counter = (metric: typeof PushMetrics.deliveries, attributes: Record<string, string>) =>
  Effect.map(Metric.value(Metric.withAttributes(metric, attributes)), (state) => state.count)

const append = (space: string, type: string, actor: string, payload: Schema.Json = {}) =>
  Effect.gen(function* () {
    const log = yield* EventLog
    yield* log.append([{ space, type, actor, payload }])
    return (yield* log.head).seq
  })

const registrations = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  Effect.map(sql<{ id: string }>`SELECT id::text AS id FROM push_registrations ORDER BY id`, (rows) =>
    rows.map((r) => r.id),
  ),
)

const jobStates = Effect.map(TestPush.jobs, (jobs) => jobs.map((j) => `${j.seq}:${j.state}`))

layer(TestPush.layer(), { excludeTestServices: true })("PushDelivery", (it) => {
  it.effect(
    "PushDeliversEncryptedToEachRegistration: every registration of each recipient gets exactly one message per event, decrypted with its browser's key to the envelope, VAPID-signed for the push service's origin, with TTL, Urgency and Topic; the actor and members who muted the space or the type get none",
    () =>
      Effect.gen(function* () {
        const service = yield* PushService.start()
        const [bob, carol, dave, erin] = [
          yield* member(service, "s1", "bob", 2),
          yield* member(service, "s1", "carol"),
          yield* member(service, "s1", "dave"),
          yield* member(service, "s1", "erin"),
        ]
        const alice = yield* member(service, "s1", "alice")
        yield* PushAudience.mute("dave", { space: "s1" })
        yield* PushAudience.mute("erin", { type: "card.moved" })
        const created = yield* append("s1", "card.created", "alice", { summary: "Alice added “Plan”" })
        const moved = yield* append("s1", "card.moved", "carol")
        assert.strictEqual((yield* TestPush.round())._tag, "Processed")

        const { finalized } = yield* startWorker
        // created: bob ×2, carol, erin; moved: bob ×2, alice (carol acted, erin muted the type).
        const expected = [
          ...bob.map((b) => `${b.browser.id}:${created}`),
          ...carol.map((b) => `${b.browser.id}:${created}`),
          ...erin.map((b) => `${b.browser.id}:${created}`),
          ...bob.map((b) => `${b.browser.id}:${moved}`),
          ...alice.map((b) => `${b.browser.id}:${moved}`),
        ].sort()
        const messages = yield* service.take(expected.length)
        // One job per event, each a batch of its recipients' registrations.
        yield* outcomes(finalized, 2)
        const got = messages.map((m) => `${m.subscriptionId}:${JSON.parse(m.plaintext).event.split(".")[1]}`).sort()
        assert.deepStrictEqual(got, expected)
        assert.strictEqual(service.log.delivered.length, expected.length, "nothing more arrived")
        assert.strictEqual(service.log.rejected.length, 0)
        assert.isFalse(got.some((g) => dave.some((d) => g.startsWith(d.browser.id))))

        const first = messages.find((m) => JSON.parse(m.plaintext).type === "card.created")!
        const registrationOf = new Map([...bob, ...carol, ...erin, ...alice].map((b) => [b.browser.id, b.registration]))
        const key = PushMessageKey.make(1, registrationOf.get(first.subscriptionId)!, created)
        const envelope = JSON.parse(first.plaintext)
        assert.deepStrictEqual(
          { ...envelope, timestamp: typeof envelope.timestamp },
          {
            version: 2,
            type: "card.created",
            space: "s1",
            id: key,
            tag: key,
            event: `1.${created}`,
            timestamp: "string",
            summary: "Alice added “Plan”",
          },
        )
        assert.strictEqual(first.headers.urgency, "normal")
        assert.strictEqual(first.headers.topic, PushMessageKey.topic(key))
        // One key per message: no two messages share a topic or a tag.
        assert.strictEqual(new Set(messages.map((m) => m.headers.topic)).size, messages.length)
        assert.strictEqual(new Set(messages.map((m) => JSON.parse(m.plaintext).tag)).size, messages.length)
        const ttl = Number(first.headers.ttl)
        assert.isTrue(ttl > 86_000 && ttl <= 86_400, `TTL ${ttl}`)
        assert.strictEqual(first.vapid.aud, service.url)
        assert.strictEqual(first.vapid.sub, TestPush.subject)
        const states = yield* jobStates
        assert.deepStrictEqual(states.map((s) => s.split(":")[0]).sort(), [String(created), String(moved)].sort())
        assert.isTrue(
          states.every((s) => s.endsWith(":completed")),
          "every job completed",
        )
      }).pipe(Effect.scoped),
  )

  it.effect(
    "PushRevokedRightIsDeadWithoutRequest: a recipient whose push.deliver right was revoked after the round gets no request, and the job is dead; the one still allowed gets its message",
    () =>
      Effect.gen(function* () {
        const service = yield* PushService.start()
        const [kept] = yield* member(service, "s2", "kim")
        const [revoked] = yield* member(service, "s2", "rob")
        const seq = yield* append("s2", "card.created", "someone")
        assert.strictEqual((yield* TestPush.round())._tag, "Processed")
        yield* PermissionGrants.revoke("rob", pushDeliver, "s2")
        const deniedBefore = yield* counter(PushMetrics.deliveries, { outcome: "denied" })

        const { finalized } = yield* startWorker
        // One job for the event: delivered to kim, dead for rob, so it ends cancelled naming rob.
        const done = yield* outcomes(finalized, 1)
        const [message] = yield* service.take(1)
        assert.strictEqual(message!.subscriptionId, kept!.browser.id)
        assert.deepStrictEqual(
          done.map((d) => d.outcome._tag),
          ["Cancelled"],
        )
        assert.isFalse(service.log.delivered.some((m) => m.subscriptionId === revoked!.browser.id))
        assert.strictEqual(service.log.rejected.length, 0)
        const jobs = yield* TestPush.jobs
        const dead = jobs.find((j) => j.seq === String(seq))!
        assert.strictEqual(dead.state, "cancelled")
        assert.include(dead.errors[0]!.message, "push.deliver")
        assert.include(dead.errors[0]!.message, `registration ${revoked!.registration}`)
        assert.notInclude(dead.errors[0]!.message, `registration ${kept!.registration}:`)
        assert.strictEqual((yield* counter(PushMetrics.deliveries, { outcome: "denied" })) - deniedBefore, 1)
      }).pipe(Effect.scoped),
  )

  it.effect(
    "PushGoneRemovesRegistration: a 404 or a 410 from the push service removes that registration (counted as gone); the others stay",
    () =>
      Effect.gen(function* () {
        const service = yield* PushService.start()
        const [a, b, c] = yield* member(service, "s3", "gina", 3)
        service.script(a!.browser.id, [{ status: 404 }])
        service.script(b!.browser.id, [{ status: 410 }])
        const removedBefore = yield* counter(PushMetrics.registrationsRemoved, { cause: "gone" })
        yield* append("s3", "card.created", "someone")
        yield* TestPush.round()
        const { finalized } = yield* startWorker
        yield* outcomes(finalized, 1)
        assert.deepStrictEqual((yield* service.take(3)).map((m) => m.status).sort(), [201, 404, 410])
        const left = yield* registrations
        assert.isFalse(left.includes(a!.registration))
        assert.isFalse(left.includes(b!.registration))
        assert.isTrue(left.includes(c!.registration))
        assert.strictEqual((yield* counter(PushMetrics.registrationsRemoved, { cause: "gone" })) - removedBefore, 2)
      }).pipe(Effect.scoped),
  )

  it.effect(
    "PushConfigErrorsKeepRegistration: 400, 401 and 403 are dead and counted as configuration errors, and every registration is kept; so is a real wrong VAPID key (the push service refuses the token)",
    () =>
      Effect.gen(function* () {
        const service = yield* PushService.start()
        const browsers = yield* member(service, "s4", "hal", 3)
        const statuses = [400, 401, 403] as const
        for (const [i, b] of browsers.entries()) service.script(b.browser.id, [{ status: statuses[i]! }])
        // These browsers subscribed with another server key than the one the worker signs with.
        const strict = yield* PushService.start({ applicationServerKey: TestPush.vapidKeys().publicKey })
        const [mismatched] = yield* member(strict, "s4", "ivy")
        const before = yield* counter(PushMetrics.deliveries, { outcome: "config_error" })
        yield* append("s4", "card.created", "someone")
        yield* TestPush.round()
        const { finalized } = yield* startWorker
        // One job for the event's four registrations, every one of them dead.
        const done = yield* outcomes(finalized, 1)
        assert.deepStrictEqual(
          done.map((d) => d.outcome._tag),
          ["Cancelled"],
        )
        assert.deepStrictEqual((yield* service.take(3)).map((m) => m.status).sort(), [400, 401, 403])
        const [refused] = yield* strict.takeRejections(1)
        assert.strictEqual(refused!.status, 401)
        assert.strictEqual(refused!.subscriptionId, mismatched!.browser.id)
        assert.strictEqual((yield* counter(PushMetrics.deliveries, { outcome: "config_error" })) - before, 4)
        const left = yield* registrations
        assert.isTrue([...browsers, mismatched!].every((b) => left.includes(b.registration)))
      }).pipe(Effect.scoped),
  )

  it.effect(
    "PushPayloadTooLargeIsDead: a 413 is dead at once (never retried), counted, and the registration is kept",
    () =>
      Effect.gen(function* () {
        const service = yield* PushService.start()
        const [big] = yield* member(service, "s5", "ida")
        service.script(big!.browser.id, [{ status: 413 }])
        const before = yield* counter(PushMetrics.deliveries, { outcome: "payload_too_large" })
        yield* append("s5", "card.created", "someone")
        yield* TestPush.round()
        const { finalized } = yield* startWorker
        const [done] = yield* outcomes(finalized, 1)
        assert.strictEqual(done!.outcome._tag, "Cancelled")
        assert.strictEqual(service.log.delivered.filter((m) => m.subscriptionId === big!.browser.id).length, 1)
        assert.strictEqual((yield* counter(PushMetrics.deliveries, { outcome: "payload_too_large" })) - before, 1)
        assert.isTrue((yield* registrations).includes(big!.registration))
      }).pipe(Effect.scoped),
  )
})

const idle = (finalized: Queue.Dequeue<Reported>, service: PushService.PushService, received: number) =>
  Effect.gen(function* () {
    assert.strictEqual(yield* Queue.size(finalized), 0, "no outcome before its time")
    assert.strictEqual(service.log.delivered.length, received, "no request before its time")
  })

layer(TestPush.layer({ ttl: Duration.minutes(3) }), { excludeTestServices: true })("PushDelivery retries", (it) => {
  it.effect(
    "PushRetriesOn5xxAndRetryAfter: a 500 is retried after 10 s, a 429 waits for its Retry-After (120 s) without spending an attempt, then the message is delivered; a push service failing for longer than the TTL (3 min here) gets its retries at 10 s and 60 s, and then the job is dead without another request",
    () =>
      Effect.gen(function* () {
        const service = yield* PushService.start()
        const [flaky] = yield* member(service, "s6", "jo")
        const [down] = yield* member(service, "s7", "kai")
        service.script(flaky!.browser.id, [{ status: 500 }, { status: 429, retryAfter: "120" }, { status: 201 }])
        service.script(
          down!.browser.id,
          Array.from({ length: 10 }, () => ({ status: 503 as const })),
        )
        yield* append("s6", "card.created", "someone")
        yield* append("s7", "card.created", "someone")
        yield* TestPush.round()
        // The test clock a little ahead of the database's, so the jobs are due at once.
        yield* TestClock.setTime(Date.now() + 1000)
        const { finalized } = yield* startWorker
        const byJob = new Map<string, string>()
        for (const j of yield* TestPush.jobs) byJob.set(j.id, j.registration === flaky!.registration ? "flaky" : "down")
        const take = (n: number) =>
          Effect.map(outcomes(finalized, n), (rs) =>
            rs.map((r) => `${byJob.get(r.id.toString())}:${r.outcome._tag}`).sort(),
          )

        assert.deepStrictEqual(yield* take(2), ["down:Retry", "flaky:Retry"])
        yield* TestClock.adjust("9 seconds")
        yield* idle(finalized, service, 2)
        yield* TestClock.adjust("1 second")
        assert.deepStrictEqual(yield* take(2), ["down:Retry", "flaky:Snooze"])
        assert.strictEqual(service.log.delivered.length, 4)
        yield* TestClock.adjust("59 seconds")
        yield* idle(finalized, service, 4)
        yield* TestClock.adjust("1 second")
        // down's third attempt (70 s after its first) and nothing for flaky, who waits 120 s.
        assert.deepStrictEqual(yield* take(1), ["down:Retry"])
        yield* TestClock.adjust("59 seconds")
        yield* idle(finalized, service, 5)
        yield* TestClock.adjust("1 second")
        assert.deepStrictEqual(yield* take(1), ["flaky:Completed"])
        assert.strictEqual(service.log.delivered.at(-1)!.status, 201)
        // down's next try is 5 min after its third (at 70 s, so at 370 s; now is 130 s): past the 3 min
        // TTL, so it ends without a request. The clock stops at that time: moved further while the
        // attempt runs, it would pass the attempt's timeout and the watchdog would end it instead.
        yield* TestClock.adjust("4 minutes")
        const last = yield* take(1)
        assert.deepStrictEqual(last, ["down:Cancelled"], JSON.stringify((yield* TestPush.jobs).map((j) => j.errors)))
        assert.strictEqual(service.log.delivered.filter((m) => m.subscriptionId === down!.browser.id).length, 3)
        const dead = (yield* TestPush.jobs).find((j) => j.registration === down!.registration)!
        assert.strictEqual(dead.state, "cancelled")
        assert.include(dead.errors.at(-1)!.message, "TTL")
      }).pipe(Effect.scoped, Effect.provide(TestClock.layer())),
  )
})
