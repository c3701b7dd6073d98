import { randomBytes } from "node:crypto"
import { assert, describe, it } from "@effect/vitest"
import { ConfigProvider, Effect, Redacted } from "effect"
import { InvalidSecretKey, loadKey, open, parseKey, SecretBoxError, seal } from "../../src/crypto/SecretBox.ts"
import { InvalidConfig } from "../../src/platform/BothyConfig.ts"
import * as WebhookSecret from "../../src/webhooks/subscriptions/WebhookSecret.ts"

const variable = "BOTHY_WEBHOOK_SECRET_KEY"
const rawKey = () => randomBytes(32).toString("base64")
const freshKey = () => parseKey(Redacted.make(rawKey()))

const withEnv = (env: Record<string, string>) => Effect.provide(ConfigProvider.layer(ConfigProvider.fromEnv({ env })))

const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.+/="

/**
 * Every text that differs from `text` in exactly one character. All replacements, not just one:
 * a base64url part's last character has spare bits, and most single changes there would leave the
 * decoded bytes as they were if the decoder were lenient.
 */
const oneCharacterChanges = function* (text: string) {
  for (let i = 0; i < text.length; i++) {
    for (const c of alphabet) {
      if (c !== text[i]) yield { at: i, changed: text.slice(0, i) + c + text.slice(i + 1) }
    }
  }
}

describe("SecretBox", () => {
  it.effect("SealOpenRoundTrip: open gives back exactly what was sealed", () =>
    Effect.gen(function* () {
      const key = yield* freshKey()
      for (const secret of [WebhookSecret.generate(), Redacted.make(""), Redacted.make("grüße ✓ and a longer tail")]) {
        const sealed = seal(key, secret)
        assert.match(sealed, /^v1\.[A-Za-z0-9_-]{8}\.[A-Za-z0-9_-]{16}\.[A-Za-z0-9_-]*\.[A-Za-z0-9_-]{22}$/)
        const opened = yield* open(key, sealed)
        assert.strictEqual(Redacted.value(opened), Redacted.value(secret))
      }
    }),
  )

  it.effect("SealIsRandomized: two seals of the same secret differ and both open", () =>
    Effect.gen(function* () {
      const key = yield* freshKey()
      const secret = WebhookSecret.generate()
      const [a, b] = [seal(key, secret), seal(key, secret)]
      assert.notStrictEqual(a, b)
      assert.notStrictEqual(a.split(".")[2], b.split(".")[2], "a fresh iv each time")
      assert.strictEqual(Redacted.value(yield* open(key, a)), Redacted.value(secret))
      assert.strictEqual(Redacted.value(yield* open(key, b)), Redacted.value(secret))
    }),
  )

  it.effect("SealedTextHidesSecret: neither the secret nor any base64 of it appears", () =>
    Effect.gen(function* () {
      const raw = rawKey()
      const key = yield* parseKey(Redacted.make(raw))
      const secret = WebhookSecret.generate()
      const value = Redacted.value(secret)
      const inner = value.slice("whsec_".length)
      const sealed = seal(key, secret)
      const bytes = Buffer.from(inner, "base64")
      for (const form of [
        value,
        inner,
        Buffer.from(value).toString("base64"),
        Buffer.from(value).toString("base64url"),
        bytes.toString("base64url"),
        bytes.toString("hex"),
      ]) {
        assert.notInclude(sealed, form)
      }
      // Nor does a printed key show its material.
      assert.notInclude(JSON.stringify(key), raw)
      assert.notInclude(String(key.material), raw)
    }),
  )

  it.effect("OpenRejectsTampering: changing any one character, or the shape, is a SecretBoxError", () =>
    Effect.gen(function* () {
      const key = yield* freshKey()
      const sealed = seal(key, WebhookSecret.generate())
      const reasons = new Set<string>()
      for (const { at, changed } of oneCharacterChanges(sealed)) {
        const error = yield* open(key, changed).pipe(Effect.flip)
        assert.instanceOf(error, SecretBoxError, `character ${at}: ${changed}`)
        reasons.add(error.reason)
      }
      // Each line of defence was reached: the format check, the key id, and GCM's tag.
      assert.deepStrictEqual([...reasons].sort(), ["KeyMismatch", "Malformed", "Tampered"])

      const [version, id, iv, ciphertext, tag] = sealed.split(".")
      for (const bad of [
        "",
        sealed.slice(0, -1),
        `${sealed}A`,
        `${sealed}.`,
        [version, id, iv, ciphertext].join("."),
        [version, id, iv, tag, ciphertext].join("."),
        [version, id, iv, "", tag].join("."),
        ["v2", id, iv, ciphertext, tag].join("."),
      ]) {
        const error = yield* open(key, bad).pipe(Effect.flip)
        assert.instanceOf(error, SecretBoxError, bad)
        assert.notInclude(error.message, ciphertext!)
      }
    }),
  )

  it.effect("OpenRejectsWrongKey: by key id, and by GCM itself when the id is rewritten", () =>
    Effect.gen(function* () {
      const [right, wrong] = [yield* freshKey(), yield* freshKey()]
      const sealed = seal(right, WebhookSecret.generate())
      const mismatch = yield* open(wrong, sealed).pipe(Effect.flip)
      assert.strictEqual(mismatch.reason, "KeyMismatch")
      assert.include(mismatch.message, right.id)
      assert.include(mismatch.message, wrong.id)

      const [version, , ...rest] = sealed.split(".")
      const relabelled = [version, wrong.id, ...rest].join(".")
      const tampered = yield* open(wrong, relabelled).pipe(Effect.flip)
      assert.strictEqual(tampered.reason, "Tampered")
      // The id is authenticated too: relabelling fails under the right key as well.
      assert.instanceOf(yield* open(right, relabelled).pipe(Effect.flip), SecretBoxError)
    }),
  )

  it.effect("BadKeyRefused: wrong length or not base64, named by variable, never quoting the value", () =>
    Effect.gen(function* () {
      const bad = [
        randomBytes(16).toString("base64"),
        randomBytes(33).toString("base64"),
        randomBytes(64).toString("base64"),
        randomBytes(32).toString("hex"),
        // base64url and unpadded forms of a 32-byte key: not the documented form.
        Buffer.alloc(32, 0xfb).toString("base64url"),
        randomBytes(32).toString("base64").replace("=", ""),
        "correct horse battery staple!",
        "   ",
      ]
      for (const value of bad) {
        const parsed = yield* parseKey(Redacted.make(value)).pipe(Effect.flip)
        assert.instanceOf(parsed, InvalidSecretKey)
        assert.include(parsed.message, variable)

        const loaded = yield* loadKey.pipe(withEnv({ [variable]: value }), Effect.flip)
        assert.instanceOf(loaded, InvalidConfig)
        assert.deepStrictEqual(loaded.keys, ["webhook.secret_key"])
        assert.include(loaded.message, variable)
        assert.notInclude(loaded.message, "\n", "one line")

        for (const text of [parsed.message, JSON.stringify(parsed), loaded.message, JSON.stringify(loaded)]) {
          if (value.trim() !== "") assert.notInclude(text, value.trim(), value)
        }
      }
    }),
  )

  it.effect("LoadKey: reads BOTHY_WEBHOOK_SECRET_KEY (trimmed) and requires it", () =>
    Effect.gen(function* () {
      const raw = rawKey()
      const direct = yield* parseKey(Redacted.make(raw))
      const loaded = yield* loadKey.pipe(withEnv({ [variable]: `${raw}\n` }))
      assert.strictEqual(loaded.id, direct.id)
      assert.strictEqual(Redacted.value(yield* open(loaded, seal(direct, Redacted.make("s")))), "s")

      const missing = yield* loadKey.pipe(withEnv({}), Effect.flip)
      assert.include(missing.message, variable)
      assert.include(missing.message, "required")
    }),
  )
})
