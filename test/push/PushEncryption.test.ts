import { assert, describe, it } from "@effect/vitest"
import { Cause, Effect, Exit, Redacted, Result } from "effect"
import { send } from "../../src/outbound/OutboundSender.ts"
import type { TargetPolicy } from "../../src/outbound/OutboundTarget.ts"
import * as PushEncryption from "../../src/push/PushEncryption.ts"
import type * as PushRequest from "../../src/push/PushRequest.ts"
import * as PushVapid from "../../src/push/PushVapid.ts"
import * as PushService from "../../testkit/PushService.ts"

const policy: TargetPolicy = { allowHttpLoopback: true, allowCidrs: [], allowHosts: [] }

const dying = new URL("../support/DyingEncryptionThread.ts", import.meta.url)

/** A push service, a browser registered with it, and the input of one message to it. */
const world = Effect.gen(function* () {
  const pair = PushVapid.generate()
  const checked = PushVapid.check({
    ...pair,
    privateKey: Redacted.make(pair.privateKey),
    subject: "mailto:t@bothy.example",
  })
  if (Result.isFailure(checked)) return yield* Effect.die(checked.failure)
  const service = yield* PushService.start({ applicationServerKey: pair.publicKey })
  const browser = PushService.browserSubscription(service, "alice")
  const cache = yield* PushVapid.makeTokenCache(checked.success)
  const authorization = yield* cache.authorization(new URL(browser.json.endpoint).origin)
  const input = (payload: string): PushRequest.PushRequestInput => ({
    endpoint: browser.json.endpoint,
    p256dh: browser.json.keys.p256dh,
    auth: browser.json.keys.auth,
    payload,
    ttlSeconds: 60,
    urgency: "normal",
    topic: undefined,
    authorization,
  })
  return { service, input }
})

const defectOf = <A, E>(exit: Exit.Exit<A, E>) => (Exit.isFailure(exit) ? Cause.squash(exit.cause) : undefined)

describe("PushEncryption", () => {
  it.live(
    "PushEncryptionOnThreads: messages encrypted on two threads decrypt at the push service, many at once, each to its own payload; too large is the typed failure; a key web-push refuses is a defect and the thread lives on",
    () =>
      Effect.gen(function* () {
        const { service, input } = yield* world
        const encryption = yield* PushEncryption.make(2)
        const payloads = Array.from({ length: 40 }, (_, i) => `{"n":${i}}`)
        const requests = yield* Effect.forEach(payloads, (p) => encryption.build(input(p)), {
          concurrency: "unbounded",
        })
        for (const request of requests) assert.strictEqual((yield* send(request, policy)).status, 201)
        const got = yield* service.take(payloads.length)
        assert.deepStrictEqual(got.map((m) => m.plaintext).sort(), [...payloads].sort())

        const tooLarge = yield* Effect.flip(encryption.build(input("x".repeat(3001))))
        assert.deepStrictEqual([tooLarge._tag, tooLarge.bytes, tooLarge.max], ["PushPayloadTooLarge", 3001, 3000])

        const refused = yield* Effect.exit(encryption.build({ ...input("{}"), p256dh: "AAAA" }))
        assert.instanceOf(defectOf(refused), PushEncryption.PushEncryptionDefect)
        const after = yield* encryption.build(input(`{"after":true}`))
        assert.strictEqual((yield* send(after, policy)).status, 201)
        assert.strictEqual((yield* service.take(1))[0]?.plaintext, `{"after":true}`)
      }).pipe(Effect.scoped),
  )

  it.live(
    "PushEncryptionThreadDeathFailsOnlyItsMessages: a thread that exits fails the message it had in hand as a defect; the next message starts a fresh thread and is sent",
    () =>
      Effect.gen(function* () {
        const { service, input } = yield* world
        const encryption = yield* PushEncryption.make(1, dying)
        const first = yield* encryption.build(input(`{"n":1}`))
        const died = yield* Effect.exit(encryption.build(input("die")))
        assert.instanceOf(defectOf(died), PushEncryption.PushEncryptionDefect)
        assert.match(String((defectOf(died) as Error).message), /exited with code 3/)
        const next = yield* encryption.build(input(`{"n":2}`))
        for (const request of [first, next]) assert.strictEqual((yield* send(request, policy)).status, 201)
        assert.deepStrictEqual(
          (yield* service.take(2)).map((m) => m.plaintext),
          [`{"n":1}`, `{"n":2}`],
        )
      }).pipe(Effect.scoped),
  )

  it.live("with 0 threads it encrypts on the caller's thread, to the same effect", () =>
    Effect.gen(function* () {
      const { service, input } = yield* world
      const encryption = yield* PushEncryption.make(0)
      assert.strictEqual((yield* send(yield* encryption.build(input(`{"inline":1}`)), policy)).status, 201)
      assert.strictEqual((yield* service.take(1))[0]?.plaintext, `{"inline":1}`)
    }).pipe(Effect.scoped),
  )

  for (const threads of [2, 0]) {
    it.live(
      `PushEncryptionBuildsABatch: with ${threads} threads, a batch of 25 with a too-large message and a refused key among them gives each input its own outcome, in order, and the others decrypt`,
      () =>
        Effect.gen(function* () {
          const { service, input } = yield* world
          const encryption = yield* PushEncryption.make(threads)
          const inputs = Array.from({ length: 25 }, (_, i) =>
            i === 7 ? input("x".repeat(3001)) : i === 18 ? { ...input("{}"), p256dh: "AAAA" } : input(`{"n":${i}}`),
          )
          const built = yield* encryption.buildMany(inputs)
          assert.strictEqual(built.length, 25)
          const tooLarge = yield* Effect.flip(built[7]!)
          assert.strictEqual(tooLarge._tag, "PushPayloadTooLarge")
          assert.instanceOf(defectOf(yield* Effect.exit(built[18]!)), Error)
          const sent = built.flatMap((b, i) => (i === 7 || i === 18 ? [] : [b]))
          for (const b of sent) assert.strictEqual((yield* send(yield* b, policy)).status, 201)
          const got = yield* service.take(sent.length)
          assert.deepStrictEqual(
            got.map((m) => m.plaintext),
            inputs.flatMap((x, i) => (i === 7 || i === 18 ? [] : [x.payload])),
          )
        }).pipe(Effect.scoped),
    )
  }
})
