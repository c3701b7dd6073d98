/**
 * A push job carries one event to a batch of registrations; what each registration gets must be
 * what a job of its own gave it: its own answer (a 410 removes only it), its own retry (only what
 * failed is sent again), its push service's 429 (only that service's registrations wait), the
 * right asked once per principal and attempt, and the single-message jobs of earlier versions
 * still delivered.
 */
import { assert, layer } from "@effect/vitest"
import { Clock, Effect, Metric, type Schema, Tracer } from "effect"
import { SqlClient } from "effect/sql"
import { TestClock } from "effect/testing"
import { Permissions } from "../../src/authz/Permissions.ts"
import { Jobs } from "../../src/jobs/Jobs.ts"
import { EventLog } from "../../src/log/EventLog.ts"
import * as PushJob from "../../src/push/PushJob.ts"
import * as PushMessageKey from "../../src/push/PushMessageKey.ts"
import * as PushMetrics from "../../src/push/PushMetrics.ts"
import * as PushProgress from "../../src/push/PushProgress.ts"
import * as PushService from "../../testkit/PushService.ts"
import { eventually } from "../support/Eventually.ts"
import * as TestPush from "../support/TestPush.ts"
import { member, outcomes, startWorker } from "../support/TestPushWorker.ts"

const append = (space: string, payload: Schema.Json = {}) =>
  Effect.gen(function* () {
    const log = yield* EventLog
    yield* log.append([{ space, type: "card.created", actor: "someone", payload }])
    return yield* log.head
  })

const registrations = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  Effect.map(sql<{ id: string }>`SELECT id::text AS id FROM push_registrations ORDER BY id`, (rows) =>
    rows.map((r) => r.id),
  ),
)

const byId = (ids: ReadonlyArray<string>) => [...ids].sort((a, b) => Number(BigInt(a) - BigInt(b)))

const to = (messages: ReadonlyArray<PushService.Delivered>) => messages.map((m) => m.subscriptionId).sort()

/** The test clock a little ahead of the database's, so that jobs are due at once. */
const clockAhead = Effect.suspend(() => TestClock.setTime(Date.now() + 1000))

layer(TestPush.layer(), { excludeTestServices: true })("PushBatch", (it) => {
  it.effect(
    "PushBatchGoneRemovesOnlyThatRegistration: in a batch of four, a 410 removes that registration alone; the other three are delivered and kept, the job completes, and the next event's batch no longer names it",
    () =>
      Effect.gen(function* () {
        const service = yield* PushService.start()
        const ann = yield* member(service, "g1", "ann", 3)
        const [bo] = yield* member(service, "g1", "bo")
        const [gone] = ann.slice(1)
        service.script(gone!.browser.id, [{ status: 410 }])
        const removedBefore = (yield* Metric.value(
          Metric.withAttributes(PushMetrics.registrationsRemoved, { cause: "gone" }),
        )).count
        yield* append("g1")
        yield* TestPush.round()
        const batch = yield* TestPush.jobs
        assert.deepStrictEqual(
          batch.map((j) => j.registrations.length),
          [4],
          "one job for the event's four registrations",
        )

        const { finalized } = yield* startWorker
        assert.deepStrictEqual(
          (yield* outcomes(finalized, 1)).map((o) => o.outcome._tag),
          ["Completed"],
        )
        const first = yield* service.take(4)
        assert.deepStrictEqual(
          first.map((m) => `${m.subscriptionId}:${m.status}`).sort(),
          [...ann, bo!].map((b) => `${b.browser.id}:${b === gone ? 410 : 201}`).sort(),
        )
        const left = yield* registrations
        assert.deepStrictEqual(left, byId([ann[0]!, ann[2]!, bo!].map((b) => b.registration)))
        const removed = (yield* Metric.value(
          Metric.withAttributes(PushMetrics.registrationsRemoved, { cause: "gone" }),
        )).count
        assert.strictEqual(removed - removedBefore, 1)

        yield* append("g1")
        yield* TestPush.round()
        yield* outcomes(finalized, 1)
        const second = yield* service.take(3)
        assert.deepStrictEqual(to(second), [ann[0]!, ann[2]!, bo!].map((b) => b.browser.id).sort())
        assert.strictEqual(service.log.delivered.length, 7, "nothing more arrived")
      }).pipe(Effect.scoped),
  )

  it.effect(
    "PushBatchRetriesOnlyFailed: of four registrations, two answered 201 and two failed (500, 503); the job keeps the two that failed, and its retry 10 s later sends to those two alone, with the keys of their first copies",
    () =>
      Effect.gen(function* () {
        const service = yield* PushService.start()
        const browsers = yield* member(service, "r1", "rae", 4)
        const [ok1, bad1, bad2, ok2] = browsers
        service.script(bad1!.browser.id, [{ status: 500 }])
        service.script(bad2!.browser.id, [{ status: 503 }])
        const { seq } = yield* append("r1")
        yield* TestPush.round()
        yield* clockAhead
        const { finalized } = yield* startWorker

        assert.deepStrictEqual(
          (yield* outcomes(finalized, 1)).map((o) => o.outcome._tag),
          ["Retry"],
        )
        const first = yield* service.take(4)
        const [job] = (yield* TestPush.jobs).filter((j) => j.seq === String(seq))
        assert.strictEqual(job!.state, "retryable")
        assert.deepStrictEqual(job!.registrations, byId([bad1!.registration, bad2!.registration]))
        assert.include(job!.errors[0]!.message, "2 of 4 registrations to retry")

        yield* TestClock.adjust("10 seconds")
        assert.deepStrictEqual(
          (yield* outcomes(finalized, 1)).map((o) => o.outcome._tag),
          ["Completed"],
        )
        const retried = yield* service.take(2)
        assert.deepStrictEqual(to(retried), [bad1!.browser.id, bad2!.browser.id].sort())
        assert.isTrue(retried.every((m) => m.status === 201))
        for (const m of retried) {
          const before = first.find((f) => f.subscriptionId === m.subscriptionId)!
          assert.strictEqual(m.headers.topic, before.headers.topic, "the retry carries the first copy's key")
        }
        for (const b of [ok1!, ok2!]) {
          assert.strictEqual(
            service.log.delivered.filter((m) => m.subscriptionId === b.browser.id).length,
            1,
            `${b.browser.id} got its message once`,
          )
        }
      }).pipe(Effect.scoped, Effect.provide(TestClock.layer())),
  )

  it.effect(
    "PushBatch429DelaysOnlyThatPushService: in a batch over two push services, one answers 429 with Retry-After 120; its registrations move to a job of their own due in 120 s, while the other service's failed registration is retried at 10 s and delivered, not held back by the 429",
    () =>
      Effect.gen(function* () {
        const slow = yield* PushService.start()
        const fast = yield* PushService.start()
        const [s1, s2] = yield* member(slow, "t1", "sam", 2)
        const [f1, f2] = yield* member(fast, "t1", "fay", 2)
        slow.script("all", [
          { status: 429, retryAfter: "120" },
          { status: 429, retryAfter: "120" },
        ])
        fast.script(f2!.browser.id, [{ status: 500 }])
        const { seq } = yield* append("t1")
        yield* TestPush.round()
        yield* clockAhead
        const startedAt = yield* Clock.currentTimeMillis
        const { finalized } = yield* startWorker

        assert.deepStrictEqual(
          (yield* outcomes(finalized, 1)).map((o) => o.outcome._tag),
          ["Retry"],
        )
        assert.deepStrictEqual(
          (yield* slow.take(2)).map((m) => m.status),
          [429, 429],
        )
        assert.deepStrictEqual(
          (yield* fast.take(2)).map((m) => `${m.subscriptionId}:${m.status}`).sort(),
          [`${f1!.browser.id}:201`, `${f2!.browser.id}:500`].sort(),
        )
        const sql = yield* SqlClient.SqlClient
        const jobs = yield* sql<{ registrations: ReadonlyArray<string>; state: string; due: number }>`
          SELECT args -> 'registrations' AS registrations, state::text AS state,
                 (extract(epoch FROM scheduled_at) * 1000)::float8 AS due
          FROM jobs WHERE kind = ${PushJob.deliverKind} AND args ->> 'seq' = ${String(seq)} ORDER BY id`
        assert.deepStrictEqual(
          jobs.map((j) => [j.registrations, j.state]),
          [
            [[f2!.registration], "retryable"],
            [byId([s1!.registration, s2!.registration]), "scheduled"],
          ],
        )
        assert.approximately(jobs[1]!.due - startedAt, 120_000, 1000, "the split job is due at the Retry-After")

        yield* TestClock.adjust("10 seconds")
        assert.deepStrictEqual(
          (yield* outcomes(finalized, 1)).map((o) => o.outcome._tag),
          ["Completed"],
        )
        const [again] = yield* fast.take(1)
        assert.strictEqual(`${again!.subscriptionId}:${again!.status}`, `${f2!.browser.id}:201`)
        assert.strictEqual(slow.log.delivered.length, 2, "nothing to the throttled service before its time")

        yield* TestClock.adjust("110 seconds")
        assert.deepStrictEqual(
          (yield* outcomes(finalized, 1)).map((o) => o.outcome._tag),
          ["Completed"],
        )
        assert.deepStrictEqual(
          (yield* slow.take(2)).map((m) => `${m.subscriptionId}:${m.status}`).sort(),
          [`${s1!.browser.id}:201`, `${s2!.browser.id}:201`].sort(),
        )
        assert.strictEqual(fast.log.delivered.length, 3, "nothing more to the other service")
      }).pipe(Effect.scoped, Effect.provide(TestClock.layer())),
  )

  it.effect(
    "PushBatchAsksPermissionOncePerPrincipal: with a Permissions that does not answer in SQL, an attempt asks once per principal, however many of its registrations the batch holds; the retry asks again, only for the principal left",
    () =>
      Effect.gen(function* () {
        const service = yield* PushService.start()
        const many = yield* member(service, "p1", "mo", 3)
        yield* member(service, "p1", "ned")
        service.script(many[0]!.browser.id, [{ status: 503 }])
        yield* append("p1")
        yield* TestPush.round()
        yield* clockAhead
        const grants = yield* Permissions
        const asked: Array<string> = []
        const counting = Permissions.make({
          allowed: (principal, action, space) =>
            Effect.andThen(
              Effect.sync(() => asked.push(principal)),
              grants.allowed(principal, action, space),
            ),
        })
        const { finalized } = yield* startWorker.pipe(Effect.provideService(Permissions, counting))

        yield* outcomes(finalized, 1)
        yield* service.take(4)
        assert.deepStrictEqual([...asked].sort(), ["mo", "ned"], "once per principal in the first attempt")
        yield* TestClock.adjust("10 seconds")
        assert.deepStrictEqual(
          (yield* outcomes(finalized, 1)).map((o) => o.outcome._tag),
          ["Completed"],
        )
        assert.deepStrictEqual(asked.slice(2), ["mo"], "the retry asks for the one principal left")
      }).pipe(Effect.scoped, Effect.provide(TestClock.layer())),
  )

  it.effect(
    "PushLegacyJobDeliveredAfterUpgrade: push.deliver jobs inserted by the single-message round of earlier versions are delivered by this version, with the same key; one that fails is retried from the batch args its attempt recorded",
    () =>
      Effect.gen(function* () {
        const service = yield* PushService.start()
        const [old, flaky] = yield* member(service, "u1", "uma", 2)
        service.script(flaky!.browser.id, [{ status: 500 }])
        const { seq, epoch } = yield* append("u1")
        const sql = yield* SqlClient.SqlClient
        const [{ at }] = (yield* sql<{ at: string }>`
          SELECT to_jsonb(occurred_at) #>> '{}' AS at FROM event_log WHERE seq = ${seq}`) as [{ at: string }]
        // The jobs as the round before batches made them: one per (registration, event), its unique key too.
        yield* (yield* Jobs).insert(
          [old!, flaky!].map((b) => ({
            kind: PushJob.legacyDeliverKind,
            queue: PushJob.queue,
            args: { registration: b.registration, seq: String(seq), at } satisfies PushJob.DeliverArgs,
            uniqueKey: `push:${seq}:${b.registration}`,
          })),
        )
        yield* sql`UPDATE event_consumer_cursors SET last_seq = ${seq} WHERE name = 'push'`
        yield* clockAhead
        const { finalized } = yield* startWorker

        assert.deepStrictEqual((yield* outcomes(finalized, 2)).map((o) => o.outcome._tag).sort(), [
          "Completed",
          "Retry",
        ])
        const first = yield* service.take(2)
        const delivered = first.find((m) => m.subscriptionId === old!.browser.id)!
        const key = PushMessageKey.make(epoch, old!.registration, seq)
        assert.strictEqual(JSON.parse(delivered.plaintext).id, key)
        assert.strictEqual(delivered.headers.topic, PushMessageKey.topic(key))
        const pending = (yield* TestPush.jobs).filter((j) => j.seq === String(seq) && j.state === "retryable")
        assert.deepStrictEqual(
          pending.map((j) => [j.kind, j.registrations]),
          [[PushJob.legacyDeliverKind, [flaky!.registration]]],
        )

        yield* TestClock.adjust("10 seconds")
        assert.deepStrictEqual(
          (yield* outcomes(finalized, 1)).map((o) => o.outcome._tag),
          ["Completed"],
        )
        const [retried] = yield* service.take(1)
        assert.strictEqual(`${retried!.subscriptionId}:${retried!.status}`, `${flaky!.browser.id}:201`)
        assert.strictEqual(JSON.parse(retried!.plaintext).id, PushMessageKey.make(epoch, flaky!.registration, seq))
      }).pipe(Effect.scoped, Effect.provide(TestClock.layer())),
  )

  it.effect(
    "PushProgressQuietStart: a batch whose answers come within the attempt's first 100 ms writes no progress (its outcome records it); one still waiting then writes what settled once the clock passes it, and only the held registration is left in its args",
    () => {
      const writes: Array<string> = []
      const tracer = Tracer.make({
        span: (options) => {
          if (options.name === "JobProgress.record") writes.push(options.name)
          return new Tracer.NativeSpan(options)
        },
      })
      return Effect.gen(function* () {
        const service = yield* PushService.start()
        const browsers = yield* member(service, "quiet", "quinn", 3)
        const held = browsers[1]!
        const delivered = Metric.value(Metric.withAttributes(PushMetrics.deliveries, { outcome: "delivered" }))
        const settled = (n: number) =>
          TestClock.withLive(
            eventually(delivered, (m) => m.count >= n, {
              what: `${n} messages delivered`,
              within: "20 seconds",
              every: "5 millis",
            }),
          )
        yield* clockAhead
        const { finalized } = yield* startWorker

        // Two answered at once, one held until they have settled: nothing is written meanwhile.
        service.script(held.browser.id, [{ hang: true }])
        const before = (yield* delivered).count
        yield* append("quiet")
        yield* TestPush.round()
        yield* service.take(3)
        yield* settled(before + 2)
        service.release()
        assert.deepStrictEqual(
          (yield* outcomes(finalized, 1)).map((o) => o.outcome._tag),
          ["Completed"],
        )
        assert.deepStrictEqual(writes, [], "answered within the quiet start: the outcome alone records the batch")

        // The same, but the clock passes the quiet start while one is held: what settled is written.
        service.script(held.browser.id, [{ hang: true }])
        const { seq } = yield* append("quiet")
        yield* TestPush.round()
        yield* service.take(3)
        yield* settled(before + 5)
        yield* TestClock.adjust(PushProgress.quietStart)
        // The write's span starts before its statement commits: wait for the row, not the span.
        const [job] = yield* TestClock.withLive(
          eventually(
            Effect.map(TestPush.jobs, (jobs) => jobs.filter((j) => j.seq === String(seq))),
            (jobs) => jobs[0]?.registrations.length === 1,
            { what: "the progress write recording the two answered", within: "20 seconds", every: "5 millis" },
          ),
        )
        assert.deepStrictEqual(
          [job!.state, job!.registrations],
          ["running", [held.registration]],
          "only the held registration is left",
        )
        assert.isAbove(writes.length, 0, "written by a progress write")
        service.release()
        assert.deepStrictEqual(
          (yield* outcomes(finalized, 1)).map((o) => o.outcome._tag),
          ["Completed"],
        )
        for (const b of browsers) {
          assert.strictEqual(
            service.log.delivered.filter((m) => m.subscriptionId === b.browser.id && m.status === 201).length,
            2,
            `${b.browser.id} got each event's message once`,
          )
        }
      }).pipe(Effect.scoped, Effect.provide(TestClock.layer()), Effect.withTracer(tracer))
    },
  )
})
