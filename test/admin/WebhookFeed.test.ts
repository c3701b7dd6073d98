/**
 * The pull feed over HTTP, as a receiver reads it: what the pushes carried (ids, bodies byte for
 * byte, the signature's inputs), in order; a 410 once the history right after a position is gone;
 * only the owner (or the operator) reads it; bad input is a 400 naming the parameter.
 */
import { createHmac } from "node:crypto"
import { assert, layer } from "@effect/vitest"
import { Duration, Effect, Redacted } from "effect"
import { AdminAuth, operator, principal, Unauthenticated } from "../../src/admin/AdminAuth.ts"
import * as Retention from "../../src/log/Retention.ts"
import * as DeliveryHistory from "../../src/webhooks/subscriptions/DeliveryHistory.ts"
import * as WebhookReceiver from "../../testkit/WebhookReceiver.ts"
import { appendAt, dayMillis, days } from "../support/OldEvents.ts"
import * as TestAdmin from "../support/TestAdmin.ts"
import * as TestWebhooks from "../support/TestWebhooks.ts"

/** Bearer tokens of the operator and two principals, as a host's own `AdminAuth` maps them. */
const auth = AdminAuth.make((request) => {
  const token = /^Bearer\s+(.+)$/i.exec(request.headers.authorization ?? "")?.[1]
  return token === "operator-token"
    ? Effect.succeed(operator)
    : token === "alice-token" || token === "bob-token"
      ? Effect.succeed(principal(token.slice(0, -"-token".length)))
      : Effect.fail(new Unauthenticated({ detail: "unknown token" }))
})

/** Payloads whose JSON text a careless rebuild would change: key order, numbers, escapes, non-ASCII. */
const payloads = [
  { z: 1, a: 2, nested: { b: [3, 2, 1], a: null } },
  { price: 1.5, big: 2 ** 70, tiny: 1e-7, whole: 10.0 },
  { text: 'quote " backslash \\ newline \n tab \t', unicode: "grüße 🌍 \u2028 \u0007" },
  { empty: {}, list: [], flag: false },
  "a bare string",
  [1, "two", { three: 3 }],
]

/**
 * Drainers, a receiver answering 204, the admin API with `auth`, and a subscription of alice's on
 * `space` pushing to that receiver.
 */
const started = (space: string) =>
  Effect.gen(function* () {
    const signals = yield* TestWebhooks.signals
    const receiver = yield* WebhookReceiver.start(() => ({ status: 204 }))
    yield* TestWebhooks.startDrainers(signals)
    const base = yield* TestAdmin.serve(auth)
    const alice = TestAdmin.client(base, { token: "alice-token" })
    const { id, secret } = yield* TestWebhooks.subscribe("alice", receiver.url("/alice"), [space])
    return { signals, receiver, base, alice, id, secret }
  })

/** The feed of `id` after `after` (none: from the start), as `api` reads it. */
const feedOf = (api: ReturnType<typeof TestAdmin.client>, id: string, query = "") =>
  api.get(`/v1/subscriptions/${id}/feed${query}`)

layer(TestWebhooks.layer({ retrySteps: [Duration.hours(1)] }), { excludeTestServices: true })("the pull feed", (it) => {
  it.effect(
    "FeedReturnsWhatWasPushed: the feed holds the pushes' ids and bodies byte for byte, in sequence order, with the webhook-timestamp they were signed with",
    () =>
      Effect.gen(function* () {
        const { signals, receiver, alice, id, secret } = yield* started("space-push")
        for (const payload of payloads) yield* TestWebhooks.append("space-push", payload)
        yield* TestWebhooks.round()

        // Settled: every push answered and on record, so the feed holds all of them.
        yield* signals.until(
          Effect.map(feedOf(alice, id), (page) => page.status === 200 && page.body.items.length === payloads.length),
        )
        const all = yield* feedOf(alice, id)
        assert.strictEqual(receiver.log.length, payloads.length)
        const pushed = receiver.log.map((r) => ({
          id: String(r.headers["webhook-id"]),
          timestamp: String(r.headers["webhook-timestamp"]),
          signature: String(r.headers["webhook-signature"]),
          body: r.body,
        }))
        assert.deepStrictEqual(
          all.body.items.map((e: { id: string; timestamp: string; body: string }) => ({
            id: e.id,
            timestamp: e.timestamp,
            body: e.body,
          })),
          pushed.map(({ id, timestamp, body }) => ({ id, timestamp, body })),
        )
        const epoch = JSON.parse(pushed[0]!.body).epoch as number
        assert.deepStrictEqual(
          all.body.items.map((e: { sequence: string; epoch: number }) => `${e.epoch}.${e.sequence}`),
          payloads.map((_, i) => `${epoch}.${i + 1}`),
        )
        for (const [i, entry] of all.body.items.entries()) {
          // Byte for byte, and the signature's inputs give the very signature the push carried.
          assert.isTrue(Buffer.from(entry.body, "utf8").equals(Buffer.from(pushed[i]!.body, "utf8")))
          const key = Buffer.from(Redacted.value(secret).slice("whsec_".length), "base64")
          const signed = createHmac("sha256", key)
            .update(`${entry.id}.${entry.timestamp}.${entry.body}`)
            .digest("base64")
          assert.strictEqual(pushed[i]!.signature, `v1,${signed}`)
          assert.isNull(entry.withheld)
        }
        assert.strictEqual(all.body.next, `${epoch}.${payloads.length}`)

        // Pages follow `next`, gap-free.
        const first = yield* feedOf(alice, id, "?limit=4")
        assert.strictEqual(first.body.items.length, 4)
        const rest = yield* feedOf(alice, id, `?after=${first.body.next}&limit=4`)
        assert.deepStrictEqual(
          [...first.body.items, ...rest.body.items].map((e: { id: string }) => e.id),
          pushed.map((p) => p.id),
        )
        const none = yield* feedOf(alice, id, `?after=${all.body.next}`)
        assert.deepStrictEqual(none.body, { items: [], next: all.body.next })
      }),
  )

  it.effect(
    "FeedPastRetentionIs410: once the delivery history right after a position is removed, the feed answers 410 with the lowest position it still holds",
    () =>
      Effect.gen(function* () {
        const { signals, receiver, alice, id } = yield* started("space-410")
        const settled = (n: number) =>
          signals.until(Effect.map(feedOf(alice, id, "?after=0.0"), (page) => page.body.items?.length === n))

        for (let i = 0; i < 3; i++) yield* TestWebhooks.append("space-410", { i })
        yield* TestWebhooks.round()
        yield* settled(3)
        const epoch = JSON.parse(receiver.log[0]!.body).epoch as number
        // The history's bound, as the worker applies it, here with an age of zero: 1 to 3 leave (with
        // the other tests' deliveries on this database).
        assert.isAtLeast(yield* DeliveryHistory.removeFinished(Duration.zero), 3)
        for (let i = 3; i < 5; i++) yield* TestWebhooks.append("space-410", { i })
        yield* TestWebhooks.round()
        yield* signals.until(
          Effect.map(feedOf(alice, id, `?after=${epoch}.3`), (page) => page.body.items?.length === 2),
        )

        const gone = yield* feedOf(alice, id, `?after=${epoch}.1`)
        assert.strictEqual(gone.status, 410, JSON.stringify(gone.body))
        assert.strictEqual(gone.body._tag, "FeedPastRetention")
        assert.strictEqual(gone.body.lowest, `${epoch}.4`)
        assert.strictEqual(gone.body.after, `${epoch}.1`)
        // Right after the removed range, and from the lowest held, the feed goes on.
        const after = yield* feedOf(alice, id, `?after=${epoch}.3`)
        assert.deepStrictEqual(
          after.body.items.map((e: { body: string }) => e.body),
          receiver.log.slice(3).map((r) => r.body),
        )
        const fromLowest = yield* feedOf(alice, id)
        assert.deepStrictEqual(fromLowest.body, after.body)
      }),
  )

  it.effect(
    "FeedIsOwnerScoped: the owner and the operator read a subscription's feed; another principal gets a 404, no caller a 401; bad input is a 400 naming the parameter",
    () =>
      Effect.gen(function* () {
        const { signals, receiver, base, alice, id } = yield* started("space-owner")
        const bob = TestAdmin.client(base, { token: "bob-token" })
        const op = TestAdmin.client(base, { token: "operator-token" })
        yield* TestWebhooks.append("space-owner", { secret: "alice's" })
        yield* TestWebhooks.round()
        yield* signals.until(Effect.map(feedOf(alice, id), (page) => page.body.items?.length === 1))

        const asOperator = yield* feedOf(op, id)
        assert.strictEqual(asOperator.status, 200)
        assert.strictEqual(asOperator.body.items[0].body, receiver.log[0]!.body)
        const asBob = yield* feedOf(bob, id)
        assert.strictEqual(asBob.status, 404)
        assert.strictEqual(asBob.body._tag, "SubscriptionNotFound")
        assert.notInclude(JSON.stringify(asBob.body), "alice's")
        // Another's and one that does not exist answer alike.
        const missing = yield* feedOf(bob, "00000000-0000-4000-8000-000000000000")
        assert.deepStrictEqual([missing.status, missing.body._tag], [404, "SubscriptionNotFound"])
        const anonymous = yield* TestAdmin.call(base, "GET", `/v1/subscriptions/${id}/feed`)
        assert.strictEqual(anonymous.status, 401)

        const bad = [
          [`/v1/subscriptions/${id}/feed?after=one.two`, "query.after"],
          [`/v1/subscriptions/${id}/feed?after=1`, "query.after"],
          [`/v1/subscriptions/${id}/feed?after=1.99999999999999999999`, "query.after"],
          [`/v1/subscriptions/${id}/feed?after=1.9223372036854775808`, "query.after"],
          [`/v1/subscriptions/${id}/feed?after=2147483648.1`, "query.after"],
          [`/v1/subscriptions/${id}/feed?after=-1.2`, "query.after"],
          [`/v1/subscriptions/${id}/feed?limit=0`, "query.limit"],
          [`/v1/subscriptions/${id}/feed?limit=501`, "query.limit"],
          [`/v1/subscriptions/${id}/feed?limit=ten`, "query.limit"],
          ["/v1/subscriptions/99999999999999999999999999/feed", "params.id"],
        ] as const
        for (const [path, field] of bad) {
          const answer = yield* TestAdmin.call(base, "GET", path, { token: "alice-token" })
          assert.strictEqual(answer.status, 400, `${path}: ${JSON.stringify(answer.body)}`)
          assert.strictEqual(answer.body._tag, "InvalidRequest", path)
          assert.strictEqual(answer.body.field, field, path)
        }
        // The largest position there can be is well formed: nothing after it.
        const last = yield* feedOf(alice, id, "?after=2147483647.9223372036854775807")
        assert.deepStrictEqual([last.status, last.body.items], [200, []])
      }),
  )
})

// Its own database: events appended at past times must come before any appended now.
layer(TestWebhooks.layer({ retrySteps: [Duration.hours(1)] }), { excludeTestServices: true })(
  "the pull feed, past the log's retention",
  (it) => {
    it.effect(
      "FeedPastRetentionIs410: once the events of the first messages left the log (retention dropped their days), the feed answers 410 with the lowest position whose event it still holds",
      () =>
        Effect.gen(function* () {
          const now = Date.now()
          yield* days(now - 12 * dayMillis, 12)
          const { signals, receiver, alice, id } = yield* started("space-aged")
          yield* appendAt([now - 11 * dayMillis, now - 10 * dayMillis, now - dayMillis], "space-aged")
          yield* TestWebhooks.round()
          yield* signals.until(Effect.map(feedOf(alice, id), (page) => page.body.items?.length === 3))
          const epoch = JSON.parse(receiver.log[0]!.body).epoch as number

          const run = yield* Retention.run({ retention: Duration.days(7), dropPause: Duration.zero })
          assert.isAtLeast(run.dropped.length, 2)
          const gone = yield* feedOf(alice, id, `?after=${epoch}.0`)
          assert.strictEqual(gone.status, 410, JSON.stringify(gone.body))
          assert.deepStrictEqual([gone.body._tag, gone.body.lowest], ["FeedPastRetention", `${epoch}.3`])
          const held = yield* feedOf(alice, id)
          assert.deepStrictEqual(
            held.body.items.map((e: { body: string }) => e.body),
            [receiver.log[2]!.body],
          )
        }),
    )
  },
)
