/**
 * Webhook signing secrets in the Standard Webhooks form: `whsec_` followed by the standard,
 * padded base64 of the key bytes, which is what receivers paste into their verifier libraries.
 *
 * What this keeps true: a secret is a `Redacted` from the moment it exists, so printing, logging
 * or serialising one shows `<redacted>`; and `InvalidWebhookSecret` describes what is wrong
 * without quoting any part of the secret, so the error is safe to log as well.
 */
import { randomBytes } from "node:crypto"
import { Effect, Redacted, Schema } from "effect"

export const prefix = "whsec_"

/** Fresh secrets have 32 bytes (256 bits), the output size of SHA-256: all the strength HMAC-SHA256 can use. */
export const generatedBytes = 32

/**
 * Accepted sizes, from the spec: "at least 24 bytes (192 bits, 512 maximum)". Above 64 bytes, the
 * SHA-256 block size, HMAC hashes the key down first, so a longer secret would add nothing.
 */
export const minBytes = 24
export const maxBytes = 64

export class InvalidWebhookSecret extends Schema.TaggedError<InvalidWebhookSecret>()("InvalidWebhookSecret", {
  reason: Schema.Literals(["NotBase64", "WrongLength"]),
  /** Never contains the secret or any part of it. */
  detail: Schema.String,
}) {
  override get message() {
    return `invalid webhook secret (${this.reason}): ${this.detail}`
  }
}

/** A new random secret, `whsec_` + base64 of 32 bytes from the OS CSPRNG. */
export const generate = (): Redacted.Redacted<string> =>
  Redacted.make(`${prefix}${randomBytes(generatedBytes).toString("base64")}`)

/**
 * The key bytes of a secret. The `whsec_` prefix is optional, as in the reference libraries.
 *
 * Only canonical, padded standard base64 is accepted: Node's decoder silently skips characters it
 * does not know, so `whsec_abc def!` would otherwise "decode" to bytes the receiver's library
 * never sees, and every signature would fail on their side instead of here.
 */
export const decode = (secret: Redacted.Redacted<string>): Effect.Effect<Uint8Array, InvalidWebhookSecret> => {
  const raw = Redacted.value(secret)
  const encoded = raw.startsWith(prefix) ? raw.slice(prefix.length) : raw
  const bytes = Buffer.from(encoded, "base64")
  if (encoded.length === 0 || bytes.toString("base64") !== encoded) {
    return Effect.fail(
      new InvalidWebhookSecret({
        reason: "NotBase64",
        detail: `expected "${prefix}" followed by standard padded base64`,
      }),
    )
  }
  if (bytes.length < minBytes || bytes.length > maxBytes) {
    return Effect.fail(
      new InvalidWebhookSecret({
        reason: "WrongLength",
        detail: `the key is ${bytes.length} bytes; expected ${minBytes} to ${maxBytes}`,
      }),
    )
  }
  return Effect.succeed(new Uint8Array(bytes))
}
