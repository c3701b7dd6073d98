import { assert, layer } from "@effect/vitest"
import { Effect, Schema } from "effect"
import { SqlClient } from "effect/sql"
import * as Consumer from "../../src/consumer/Consumer.ts"
import { EventLog } from "../../src/log/EventLog.ts"
import { testEventType } from "../../src/log/TestEvent.ts"
import * as PushAudience from "../../src/push/PushAudience.ts"
import * as PushFanOut from "../../src/push/PushFanOut.ts"
import * as PushJob from "../../src/push/PushJob.ts"
import * as PushRegistrations from "../../src/push/PushRegistrations.ts"
import * as TestPush from "../support/TestPush.ts"

/**
 * s1: alice, bob, carol, dave; s2: erin. carol muted s1, dave muted item.created everywhere, frank
 * is in no space. bob has two browsers, everyone else one.
 */
const world = Effect.gen(function* () {
  for (const p of ["alice", "bob", "carol", "dave"]) yield* PushAudience.join("s1", p)
  yield* PushAudience.join("s2", "erin")
  yield* PushAudience.mute("carol", { space: "s1" })
  yield* PushAudience.mute("dave", { type: "item.created" })
  const reg: Record<string, Array<string>> = {}
  for (const p of ["alice", "bob", "bob", "carol", "dave", "erin", "frank"]) {
    reg[p] = [...(reg[p] ?? []), (yield* PushRegistrations.register(p, TestPush.unheardSubscription())).id]
  }
  const log = yield* EventLog
  yield* log.append([
    { space: "s1", type: "item.created", actor: "alice", payload: {} },
    { space: "s1", type: "item.deleted", actor: "bob", payload: {} },
    { space: "s2", type: "item.created", actor: "alice", payload: {} },
    { space: "s3", type: "item.created", actor: "alice", payload: {} },
  ])
  const head = (yield* log.head).seq
  const [e1, e2, e3] = [head - 3n, head - 2n, head - 1n]
  // e1: bob's two (alice acted, carol muted s1, dave muted the type); e2: alice and dave (bob
  // acted, carol muted s1); e3: erin; e4: nobody is in s3.
  const expected = [
    ...reg.alice!.map((r) => `${r}:${e2}`),
    ...reg.bob!.map((r) => `${r}:${e1}`),
    ...reg.dave!.map((r) => `${r}:${e2}`),
    ...reg.erin!.map((r) => `${r}:${e3}`),
  ].sort()
  return { expected, reg }
})

const made = Effect.map(TestPush.jobs, (jobs) =>
  jobs.flatMap((j) => j.registrations.map((r) => `${r}:${j.seq}`)).sort(),
)

/** Each job's args as `push.batch` decodes them, by `registration:seq`, with the event's time in ms. */
const decodedArgs = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const rows = yield* sql<{ args: unknown }>`SELECT args FROM jobs WHERE kind = ${PushJob.deliverKind}`
  const args = yield* Effect.forEach(rows, (row) => Schema.decodeUnknownEffect(PushJob.BatchArgs)(row.args))
  return Object.fromEntries(
    args.flatMap((a) => a.registrations.map((r) => [`${r}:${a.seq}`, Date.parse(a.at ?? "")] as const)),
  )
})

const resetCursor = Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => sql`UPDATE event_consumer_cursors SET last_seq = (SELECT value FROM event_seq) - 4 WHERE name = 'push'`,
)

layer(TestPush.layer(), { excludeTestServices: true })("PushFanOut", (it) => {
  it.effect(
    "PushAudienceMembersNotActorNotMuted: a push job per event names each registration of each member of the event's space, none for the actor, for members who muted the space or the type, or for non-members; unique per (registration, seq) when a round runs again; both rounds write args that decode as PushJob.BatchArgs",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const { expected } = yield* world
        const first = yield* TestPush.round()
        assert.strictEqual(first._tag, "Processed")
        assert.deepStrictEqual(yield* made, expected)
        const inStatement = yield* decodedArgs
        assert.isTrue(Object.values(inStatement).every(Number.isFinite), "every job names its event's time")
        const keys = (yield* TestPush.jobs).map((j) => j.uniqueKey)
        assert.isTrue(keys.every((k) => k.startsWith("push:")))

        // The round again over the same events (a cursor moved back by hand): nothing doubles.
        yield* resetCursor
        const again = yield* TestPush.round()
        assert.strictEqual(again._tag, "Processed")
        if (again._tag === "Processed") assert.strictEqual(again.jobs, 0)
        assert.deepStrictEqual(yield* made, expected)

        // A host's audience that does not answer in SQL (the transactional round) makes the same jobs.
        yield* sql`DELETE FROM jobs`
        yield* resetCursor
        const sqlAudience = yield* PushAudience.PushAudience
        const host: PushAudience.PushAudienceShape = { recipients: sqlAudience.recipients }
        const round = yield* Consumer.makeRound(PushFanOut.roundOptions(host, TestPush.settings().ttl, 2))
        assert.strictEqual((yield* round)._tag, "Processed")
        assert.strictEqual((yield* round)._tag, "Processed")
        assert.deepStrictEqual(yield* made, expected)
        assert.deepStrictEqual(yield* decodedArgs, inStatement, "the same args as the one-statement round's")
      }),
  )
})

layer(TestPush.layer(), { excludeTestServices: true })("PushFanOut and test events", (it) => {
  it.effect(
    "PushNotifiesNobodyOfTestEvents: a bothy.subscription.test event in a space with members makes no push job, by the one-statement round or a host's audience, while the event beside it does",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        yield* PushAudience.join("te", "tess")
        const registration = (yield* PushRegistrations.register("tess", TestPush.unheardSubscription())).id
        const log = yield* EventLog
        yield* log.append([
          { space: "te", type: testEventType, actor: "bothy", payload: { subscription: "x" } },
          { space: "te", type: "item.created", actor: "bothy", payload: {} },
        ])
        const head = (yield* log.head).seq
        assert.strictEqual((yield* TestPush.round())._tag, "Processed")
        assert.deepStrictEqual(yield* made, [`${registration}:${head}`], "only the ordinary event")

        yield* sql`DELETE FROM jobs`
        yield* sql`UPDATE event_consumer_cursors SET last_seq = ${head - 2n} WHERE name = 'push'`
        const sqlAudience = yield* PushAudience.PushAudience
        const host: PushAudience.PushAudienceShape = { recipients: sqlAudience.recipients }
        const round = yield* Consumer.makeRound(PushFanOut.roundOptions(host, TestPush.settings().ttl, 10))
        assert.strictEqual((yield* round)._tag, "Processed")
        assert.deepStrictEqual(yield* made, [`${registration}:${head}`], "the same with a host's audience")
      }),
  )
})

/** The jobs as their registrations, in order of seq and first registration. */
const batches = Effect.map(TestPush.jobs, (jobs) => jobs.map((j) => ({ seq: j.seq, registrations: j.registrations })))

layer(TestPush.layer({ batchSize: 2 }), { excludeTestServices: true })("PushFanOut in batches", (it) => {
  it.effect(
    "PushBatchesOfAtMostBatchSize: an event's registrations are cut into jobs of at most push.batch_size, in id order, the same by the one-statement round and the transactional one, each unique per (seq, first registration)",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        for (const p of ["ann", "ben", "cy"]) yield* PushAudience.join("b1", p)
        const ids: Array<string> = []
        for (const p of ["ann", "ann", "ben", "cy", "cy"]) {
          ids.push((yield* PushRegistrations.register(p, TestPush.unheardSubscription())).id)
        }
        const log = yield* EventLog
        yield* log.append([
          { space: "b1", type: "t", actor: "nobody", payload: {} },
          { space: "b1", type: "t", actor: "ben", payload: {} },
        ])
        const head = (yield* log.head).seq
        const [e1, e2] = [String(head - 1n), String(head)]
        const sorted = [...ids].sort((a, b) => Number(BigInt(a) - BigInt(b)))
        const withoutBen = sorted.filter((r) => r !== ids[2])
        const expected = [
          { seq: e1, registrations: sorted.slice(0, 2) },
          { seq: e1, registrations: sorted.slice(2, 4) },
          { seq: e1, registrations: sorted.slice(4) },
          { seq: e2, registrations: withoutBen.slice(0, 2) },
          { seq: e2, registrations: withoutBen.slice(2) },
        ]
        assert.strictEqual((yield* TestPush.round())._tag, "Processed")
        assert.deepStrictEqual(yield* batches, expected)
        const keys = (yield* TestPush.jobs).map((j) => j.uniqueKey)
        assert.deepStrictEqual(
          keys,
          expected.map((b) => `push:${b.seq}:b${b.registrations[0]}`),
        )

        yield* sql`DELETE FROM jobs`
        yield* sql`UPDATE event_consumer_cursors SET last_seq = ${head - 2n} WHERE name = 'push'`
        const sqlAudience = yield* PushAudience.PushAudience
        const host: PushAudience.PushAudienceShape = { recipients: sqlAudience.recipients }
        const round = yield* Consumer.makeRound(PushFanOut.roundOptions(host, TestPush.settings().ttl, 10, 2))
        assert.strictEqual((yield* round)._tag, "Processed")
        assert.deepStrictEqual(yield* batches, expected, "the transactional round cuts the same batches")
      }),
  )
})
