import { createECDH, randomBytes } from "node:crypto"
import { assert, describe, it } from "@effect/vitest"
import ece from "http_ece"
import webpush from "web-push"
import * as WebPushBrowser from "../../src/demo/WebPushBrowser.ts"
import * as PushEncryptionRecord from "../../src/push/PushEncryptionRecord.ts"
import * as PushRequest from "../../src/push/PushRequest.ts"

const b64 = (text: string) => Buffer.from(text, "base64url")

// RFC 8291, section 5 (and Appendix A): every input of the worked example, and its output.
const rfc = {
  plaintext: "When I grow up, I want to be a watermelon",
  uaPublic: "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4",
  uaPrivate: "q1dXpw3UpT5VOmu_cf_v6ih07Aems3njxI-JWgLcM94",
  authSecret: "BTBZMqHH6r4Tts7J_aSIgg",
  asPrivate: "yfWPiYE-n46HLnH0KqZOF1fJJU3MYrct3AELtAQ-oRw",
  asPublic: "BP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A8",
  salt: "DGv6ra1nlYgDCS1FRnbzlw",
  body: "DGv6ra1nlYgDCS1FRnbzlwAAEABBBP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A_yl95bQpu6cVPTpK4Mqgkf1CXztLVBSt2Ks3oZwbuwXPXLWyouBWLVWGNWQexSgSxsj_Qulcy4a-fN",
}

/** A browser: its key pair and auth secret, as `PushSubscription` makes them. */
const browser = () => {
  const ecdh = createECDH("prime256v1")
  ecdh.generateKeys()
  return { ecdh, authSecret: randomBytes(16) }
}

/** What web-push's own encryption library (`http_ece`, as web-push calls it) decrypts a body to. */
const eceDecrypt = (body: Buffer, b: ReturnType<typeof browser>) =>
  ece.decrypt(body, { version: "aes128gcm", privateKey: b.ecdh, authSecret: b.authSecret.toString("base64url") })

const payloads = ["", "{}", "Grüße ✓ 🎉", "x".repeat(PushRequest.maxPlaintextBytes)]

describe("PushEncryptionRecord", () => {
  it("the aes128gcm header a push service checks without decrypting: RFC 8291's body passes; cut short, another key id or a record size below the record fails", () => {
    const body = b64(rfc.body)
    assert.deepStrictEqual(WebPushBrowser.checkRecordHeader(body), { ok: true, value: undefined })
    const refused = (changed: Buffer) => {
      const checked = WebPushBrowser.checkRecordHeader(changed)
      assert.isFalse(checked.ok)
      if (!checked.ok) assert.strictEqual(checked.status, 400)
    }
    refused(body.subarray(0, 86 + 16))
    const otherIdLength = Buffer.from(body)
    otherIdLength.writeUInt8(64, 20)
    refused(otherIdLength)
    const compressedKey = Buffer.from(body)
    compressedKey.writeUInt8(2, 21)
    refused(compressedKey)
    const smallRecords = Buffer.from(body)
    smallRecords.writeUInt32BE(body.length - 87, 16)
    refused(smallRecords)
  })
  it("PushEncryptionMatchesReference: RFC 8291's worked example, byte for byte, by this construction and by web-push's; both decrypt it with the RFC's browser key", () => {
    const fixed = { ephemeralPrivateKey: b64(rfc.asPrivate), salt: b64(rfc.salt) }
    const ours = PushEncryptionRecord.encrypt(Buffer.from(rfc.plaintext), b64(rfc.uaPublic), b64(rfc.authSecret), fixed)
    assert.strictEqual(ours.toString("base64url"), rfc.body)
    assert.strictEqual(ours.subarray(21, 86).toString("base64url"), rfc.asPublic)

    const asKey = createECDH("prime256v1")
    asKey.setPrivateKey(b64(rfc.asPrivate))
    const reference = ece.encrypt(Buffer.from(rfc.plaintext), {
      version: "aes128gcm",
      dh: rfc.uaPublic,
      privateKey: asKey,
      salt: rfc.salt,
      authSecret: rfc.authSecret,
    })
    assert.strictEqual(reference.toString("base64url"), rfc.body, "the reference agrees with the RFC")

    const ua = createECDH("prime256v1")
    ua.setPrivateKey(b64(rfc.uaPrivate))
    const uaBrowser = { ecdh: ua, authSecret: b64(rfc.authSecret) }
    assert.strictEqual(eceDecrypt(ours, uaBrowser).toString("utf8"), rfc.plaintext)
    assert.deepStrictEqual(WebPushBrowser.decrypt(ours, uaBrowser), { ok: true, value: rfc.plaintext })
  })

  it("PushEncryptionMatchesReference: random keys and salts, every payload size up to the limit, keys as text or bytes: web-push's library decrypts this construction, and the RFC decryption written in the tests decrypts both", () => {
    for (const payload of payloads) {
      for (const asText of [true, false]) {
        const b = browser()
        const p256dh = b.ecdh.getPublicKey()
        const request = PushRequest.requestOf({
          endpoint: "https://fcm.googleapis.com/fcm/send/abc",
          p256dh: asText ? p256dh.toString("base64url") : p256dh,
          auth: asText ? b.authSecret.toString("base64url") : b.authSecret,
          payload,
          ttlSeconds: 60,
          urgency: "normal",
          topic: undefined,
          authorization: "vapid t=x, k=y",
        })
        if (request instanceof PushRequest.PushPayloadTooLarge) return assert.fail(request.message)
        const body = Buffer.from(request.body as Uint8Array)
        assert.strictEqual(body.length, Buffer.byteLength(payload) + PushEncryptionRecord.overheadBytes)
        assert.strictEqual(eceDecrypt(body, b).toString("utf8"), payload)
        assert.deepStrictEqual(WebPushBrowser.decrypt(body, b), { ok: true, value: payload })

        const theirs = webpush.generateRequestDetails(
          {
            endpoint: request.url,
            keys: { p256dh: p256dh.toString("base64url"), auth: b.authSecret.toString("base64url") },
          },
          Buffer.from(payload),
          { TTL: 60, urgency: "normal", contentEncoding: "aes128gcm", headers: { Authorization: "vapid t=x, k=y" } },
        )
        if (payload !== "")
          assert.deepStrictEqual(WebPushBrowser.decrypt(theirs.body as Buffer, b), { ok: true, value: payload })
        const { "Content-Length": _length, ...theirHeaders } = theirs.headers
        assert.deepStrictEqual(
          request.headers,
          Object.fromEntries(Object.entries(theirHeaders).map(([name, value]) => [name, String(value)])),
          "the same headers as web-push",
        )
      }
    }
  })

  it("PushEncryptionMatchesReference: a fresh ephemeral key and salt for every message; a key web-push refuses is refused", () => {
    const b = browser()
    const bodies = Array.from({ length: 20 }, () =>
      PushEncryptionRecord.encrypt(Buffer.from("same"), b.ecdh.getPublicKey(), b.authSecret),
    )
    assert.strictEqual(new Set(bodies.map((body) => body.subarray(0, 16).toString("hex"))).size, bodies.length)
    assert.strictEqual(new Set(bodies.map((body) => body.subarray(21, 86).toString("hex"))).size, bodies.length)
    for (const body of bodies) assert.strictEqual(eceDecrypt(body, b).toString("utf8"), "same")

    const offCurve = Buffer.concat([Buffer.from([0x04]), Buffer.alloc(64, 0x01)])
    for (const [p256dh, auth] of [
      [Buffer.from("AAAA", "base64url"), b.authSecret],
      [offCurve, b.authSecret],
      [b.ecdh.getPublicKey(), randomBytes(15)],
    ] as const) {
      assert.throws(
        () => PushEncryptionRecord.encrypt(Buffer.from("x"), p256dh, auth),
        PushEncryptionRecord.PushKeyRefused,
      )
    }
  })
})
