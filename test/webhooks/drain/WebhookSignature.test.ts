/**
 * Signatures are checked by the public `standardwebhooks` package, the reference verifier a
 * receiver would use, so these tests prove interoperability rather than agreement with ourselves.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Redacted } from "effect"
import { Webhook, WebhookVerificationError } from "standardwebhooks"
import { InvalidWebhookId, messageId, sign, type WebhookHeaders } from "../../../src/webhooks/drain/WebhookSignature.ts"
import * as WebhookSecret from "../../../src/webhooks/subscriptions/WebhookSecret.ts"

// Non-ASCII on purpose: the signature covers the UTF-8 bytes, as the receiver reads them.
const body = JSON.stringify({ type: "comment.created", data: { id: "c_1", text: "grüße ✓" } })
const id = messageId(1, "0b6f3f0e-7f5e-4d7a-9a53-2d1c1f4e8a10", 42n)

/** Throws `WebhookVerificationError` when the receiver would reject the delivery. */
const verify = (secret: Redacted.Redacted<string>, payload: string, headers: WebhookHeaders) =>
  new Webhook(Redacted.value(secret)).verify(payload, { ...headers }, { jsonParse: false })

const rejects = (secret: Redacted.Redacted<string>, payload: string, headers: WebhookHeaders, why: RegExp) =>
  assert.throws(() => verify(secret, payload, headers), WebhookVerificationError, why)

/** A `whsec_` secret whose key has `bytes` bytes. */
const secretOf = (bytes: number) => Redacted.make(`whsec_${Buffer.alloc(bytes, 0x5a).toString("base64")}`)

describe("WebhookSignature", () => {
  it.effect("SignSingleSecret: the standardwebhooks verifier accepts the headers", () =>
    Effect.gen(function* () {
      const secret = WebhookSecret.generate()
      const headers = yield* sign({ id, timestamp: new Date(), body }, [secret])
      assert.strictEqual(headers["webhook-id"], id)
      assert.match(headers["webhook-signature"], /^v1,[A-Za-z0-9+/]{43}=$/)
      verify(secret, body, headers)
    }),
  )

  it.effect("SignDuringRotation: one v1 signature per secret, in order, and either secret verifies", () =>
    Effect.gen(function* () {
      const [previous, next] = [WebhookSecret.generate(), WebhookSecret.generate()]
      const timestamp = new Date()
      const headers = yield* sign({ id, timestamp, body }, [previous, next])
      const [alone1, alone2] = [
        yield* sign({ id, timestamp, body }, [previous]),
        yield* sign({ id, timestamp, body }, [next]),
      ]
      assert.strictEqual(
        headers["webhook-signature"],
        `${alone1["webhook-signature"]} ${alone2["webhook-signature"]}`,
        "space-separated, in the order the secrets were given",
      )
      verify(previous, body, headers)
      verify(next, body, headers)
      rejects(WebhookSecret.generate(), body, headers, /No matching signature/)
    }),
  )

  it.effect("SignatureBindsBodyIdTimestampAndSecret: any change fails verification", () =>
    Effect.gen(function* () {
      const secret = WebhookSecret.generate()
      const headers = yield* sign({ id, timestamp: new Date(), body }, [secret])
      rejects(secret, body.replace("grüße", "grusse"), headers, /No matching signature/)
      rejects(secret, `${body} `, headers, /No matching signature/)
      rejects(secret, body, { ...headers, "webhook-id": messageId(1, "0b6f3f0e", 43n) }, /No matching signature/)
      const earlier = String(Number(headers["webhook-timestamp"]) - 1)
      rejects(secret, body, { ...headers, "webhook-timestamp": earlier }, /No matching signature/)
      rejects(WebhookSecret.generate(), body, headers, /No matching signature/)
    }),
  )

  it.effect("SignTimestampIsUnixSeconds: whole seconds, and the same signature the reference library makes", () =>
    Effect.gen(function* () {
      const secret = WebhookSecret.generate()
      const at = new Date(1_700_000_000_999)
      const headers = yield* sign({ id, timestamp: at, body }, [secret])
      assert.strictEqual(headers["webhook-timestamp"], "1700000000")
      assert.strictEqual(headers["webhook-signature"], new Webhook(Redacted.value(secret)).sign(id, at, body))
    }),
  )

  it.effect(
    "MessageIdIsStableAcrossRetries: same id on every attempt, distinct per epoch, subscription, sequence",
    () =>
      Effect.gen(function* () {
        assert.strictEqual(messageId(3, "sub-1", 42n), "msg_3_sub-1_42")
        const ids = [
          messageId(1, "sub-1", 1n),
          messageId(2, "sub-1", 1n),
          messageId(1, "sub-2", 1n),
          messageId(1, "sub-1", 2n),
          // `_` inside a subscription id cannot collide: epoch and sequence are digits only.
          messageId(1, "sub_1", 1n),
          messageId(1, "sub", 11n),
        ]
        assert.strictEqual(new Set(ids).size, ids.length)

        const secret = WebhookSecret.generate()
        const first = yield* sign({ id, timestamp: new Date(1_700_000_000_000), body }, [secret])
        const retry = yield* sign({ id, timestamp: new Date(1_700_000_300_000), body }, [secret])
        assert.strictEqual(retry["webhook-id"], first["webhook-id"])
        assert.notStrictEqual(retry["webhook-signature"], first["webhook-signature"])
      }),
  )

  it.effect("SignRefusesUnsafeIds: a dot (which the spec forbids) or anything outside [A-Za-z0-9_-]", () =>
    Effect.gen(function* () {
      for (const bad of ["", "msg.1", messageId(1, "a.b", 1n), "msg 1", "msg\r\nx-evil: 1", "x".repeat(257)]) {
        const error = yield* sign({ id: bad, timestamp: new Date(), body }, [WebhookSecret.generate()]).pipe(
          Effect.flip,
        )
        assert.instanceOf(error, InvalidWebhookId, JSON.stringify(bad))
      }
    }),
  )

  it.effect("GeneratedSecretShape: whsec_ + base64 of 32 bytes, redacted when printed, fresh each time", () =>
    Effect.gen(function* () {
      const secret = WebhookSecret.generate()
      const value = Redacted.value(secret)
      assert.match(value, /^whsec_[A-Za-z0-9+/]{43}=$/)
      assert.strictEqual((yield* WebhookSecret.decode(secret)).length, 32)
      assert.notInclude(String(secret), value)
      assert.notInclude(JSON.stringify({ secret }), value)
      assert.notStrictEqual(Redacted.value(WebhookSecret.generate()), value)
    }),
  )

  it.effect("DecodeSecret: 24 to 64 bytes, prefix optional; other lengths and non-base64 are refused", () =>
    Effect.gen(function* () {
      assert.strictEqual((yield* WebhookSecret.decode(secretOf(24))).length, 24)
      assert.strictEqual((yield* WebhookSecret.decode(secretOf(64))).length, 64)
      const bare = Redacted.make(Buffer.alloc(32, 1).toString("base64"))
      assert.strictEqual((yield* WebhookSecret.decode(bare)).length, 32)

      for (const [secret, reason] of [
        [secretOf(23), "WrongLength"],
        [secretOf(65), "WrongLength"],
        [Redacted.make("whsec_"), "NotBase64"],
        [Redacted.make("whsec_not base64 at all!"), "NotBase64"],
        // Unpadded and base64url forms are refused too: receivers' libraries would not decode them.
        [Redacted.make(`whsec_${Buffer.alloc(32, 1).toString("base64").replace("=", "")}`), "NotBase64"],
        [Redacted.make(`whsec_${Buffer.alloc(32, 0xfb).toString("base64url")}=`), "NotBase64"],
      ] as const) {
        const error = yield* WebhookSecret.decode(secret).pipe(Effect.flip)
        assert.strictEqual(error.reason, reason, Redacted.value(secret))
      }
    }),
  )

  it.effect("InvalidWebhookSecretHidesSecret: neither the message nor the error's JSON contain it", () =>
    Effect.gen(function* () {
      for (const secret of [secretOf(16), Redacted.make("whsec_c2VjcmV0!c2VjcmV0")]) {
        const value = Redacted.value(secret)
        const error = yield* WebhookSecret.decode(secret).pipe(Effect.flip)
        assert.instanceOf(error, WebhookSecret.InvalidWebhookSecret)
        for (const text of [error.message, String(error), JSON.stringify(error)]) {
          assert.notInclude(text, value)
          assert.notInclude(text, value.slice("whsec_".length))
        }
      }
      // And signing with a bad secret is that typed failure, not a defect.
      const error = yield* sign({ id, timestamp: new Date(), body }, [WebhookSecret.generate(), secretOf(16)]).pipe(
        Effect.flip,
      )
      assert.instanceOf(error, WebhookSecret.InvalidWebhookSecret)
    }),
  )
})
