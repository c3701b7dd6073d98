/**
 * Encryption at rest for webhook secrets (AES-256-GCM), so that a database dump alone reveals no
 * secret: the key lives outside the database, in `BOTHY_WEBHOOK_SECRET_KEY`.
 *
 * Sealed text: `v1.<key id>.<iv>.<ciphertext>.<tag>`, each part unpadded base64url.
 *
 * What this keeps true:
 * - Every seal draws a fresh random 96-bit IV, so the same secret never seals to the same text and
 *   an IV does not repeat under one key (GCM's one hard rule; random IVs stay safe for the 2^32
 *   seals per key NIST allows, far more than an installation has secrets).
 * - `open` returns a secret only for text `seal` made under this key. Any changed character, a
 *   wrong key or a malformed text is a `SecretBoxError`, never garbage plaintext. The version and
 *   key id are authenticated too (GCM additional data), so they cannot be swapped either.
 * - No error message contains a key, a secret, or a sealed text.
 *
 * The key id is a one-way fingerprint of the key (8 characters of a SHA-256 over it), not secret.
 * It tells "sealed under another key" apart from tampering now, and lets a later keyring pick the
 * right key while keys rotate, with no change of format. Rotation itself (a keyring, re-sealing
 * old rows) is not implemented yet.
 */
import { createCipheriv, createDecipheriv, createHash, randomBytes } from "node:crypto"
import { Effect, Option, Redacted, Result, Schema } from "effect"
import { envName, InvalidConfig, variable } from "../platform/BothyConfig.ts"

export const keyName = "webhook.secret_key"
/** `BOTHY_WEBHOOK_SECRET_KEY` */
export const keyVariable = envName(keyName)

const version = "v1"
const keyBytes = 32
const ivBytes = 12
const tagBytes = 16
const keyIdPattern = /^[A-Za-z0-9_-]{8}$/

export interface SecretKey {
  /** Fingerprint written into every sealed text; safe to log. */
  readonly id: string
  readonly material: Redacted.Redacted<Uint8Array>
}

export class InvalidSecretKey extends Schema.TaggedError<InvalidSecretKey>()("InvalidSecretKey", {
  /** The variable the key came from; the message names it and never quotes the value. */
  variable: Schema.String,
  detail: Schema.String,
}) {
  override get message() {
    return `invalid ${this.variable}: ${this.detail}`
  }
}

export class SecretBoxError extends Schema.TaggedError<SecretBoxError>()("SecretBoxError", {
  reason: Schema.Literals(["Malformed", "KeyMismatch", "Tampered"]),
  detail: Schema.String,
}) {
  override get message() {
    return `cannot open sealed secret (${this.reason}): ${this.detail}`
  }
}

/**
 * Node's base64 decoders skip characters they do not know and ignore spare trailing bits, so
 * several texts decode to the same bytes. Only the canonical text is accepted: otherwise a changed
 * character could still open, and "any change fails" would not hold.
 */
const canonical = (text: string, encoding: "base64" | "base64url"): Uint8Array | undefined => {
  const bytes = Buffer.from(text, encoding)
  return bytes.toString(encoding) === text ? bytes : undefined
}

const keyId = (material: Uint8Array) =>
  createHash("sha256").update("bothy/SecretBox key id\0").update(material).digest().subarray(0, 6).toString("base64url")

const additionalData = (id: string) => Buffer.from(`${version}.${id}`, "utf8")

/**
 * A key from its configured form, standard padded base64 of 32 bytes (`openssl rand -base64 32`).
 * Surrounding whitespace is ignored, since values read from files often end in a newline.
 */
export const parseKey = (raw: Redacted.Redacted<string>): Effect.Effect<SecretKey, InvalidSecretKey> => {
  const encoded = Redacted.value(raw).trim()
  const material = encoded.length > 0 ? canonical(encoded, "base64") : undefined
  if (material === undefined) {
    return Effect.fail(
      new InvalidSecretKey({
        variable: keyVariable,
        detail: `expected standard padded base64 of ${keyBytes} random bytes, e.g. from "openssl rand -base64 ${keyBytes}"`,
      }),
    )
  }
  if (material.length !== keyBytes) {
    return Effect.fail(
      new InvalidSecretKey({
        variable: keyVariable,
        detail: `the key is ${material.length} bytes; AES-256 needs exactly ${keyBytes}`,
      }),
    )
  }
  return Effect.succeed({
    id: keyId(material),
    material: Redacted.make(new Uint8Array(material), { label: keyVariable }),
  })
}

/** Encrypts a secret for storage. Each call gives a different text for the same secret. */
export const seal = (key: SecretKey, plaintext: Redacted.Redacted<string>): string => {
  const iv = randomBytes(ivBytes)
  const cipher = createCipheriv("aes-256-gcm", Redacted.value(key.material), iv, { authTagLength: tagBytes })
  cipher.setAAD(additionalData(key.id))
  const ciphertext = Buffer.concat([cipher.update(Redacted.value(plaintext), "utf8"), cipher.final()])
  return [version, key.id, iv, ciphertext, cipher.getAuthTag()]
    .map((part) => (typeof part === "string" ? part : part.toString("base64url")))
    .join(".")
}

const malformed = (detail: string) => Result.fail(new SecretBoxError({ reason: "Malformed", detail }))

const openResult = (key: SecretKey, sealed: string): Result.Result<Redacted.Redacted<string>, SecretBoxError> => {
  const parts = sealed.split(".")
  if (parts.length !== 5) return malformed(`expected 5 dot-separated parts, found ${parts.length}`)
  const [format, id, ivText, ciphertextText, tagText] = parts as [string, string, string, string, string]
  if (format !== version) return malformed(`unsupported format version; this build reads "${version}"`)
  if (!keyIdPattern.test(id)) return malformed("the key id is not 8 base64url characters")
  const iv = canonical(ivText, "base64url")
  const ciphertext = canonical(ciphertextText, "base64url")
  const tag = canonical(tagText, "base64url")
  if (iv?.length !== ivBytes || tag?.length !== tagBytes || ciphertext === undefined) {
    return malformed(`the iv, ciphertext or tag is not canonical base64url of the expected length`)
  }
  if (id !== key.id) {
    return Result.fail(
      new SecretBoxError({
        reason: "KeyMismatch",
        detail: `sealed under key ${id}, but ${keyVariable} is key ${key.id}`,
      }),
    )
  }
  return Result.try({
    try: () => {
      const decipher = createDecipheriv("aes-256-gcm", Redacted.value(key.material), iv, { authTagLength: tagBytes })
      decipher.setAAD(additionalData(id))
      decipher.setAuthTag(tag)
      // `final` throws when the tag does not match, before any plaintext is handed out.
      const plaintext = Buffer.concat([decipher.update(ciphertext), decipher.final()])
      return Redacted.make(plaintext.toString("utf8"))
    },
    catch: () =>
      new SecretBoxError({
        reason: "Tampered",
        detail: "authentication failed: the text was altered, or sealed under another key",
      }),
  })
}

/** The id of the key a sealed text was sealed under, if the text has the shape `seal` gives. */
export const keyIdOf = (sealed: string): string | undefined => {
  const id = sealed.split(".")[1]
  return id !== undefined && keyIdPattern.test(id) ? id : undefined
}

/** Decrypts what `seal` made under the same key. */
export const open = (key: SecretKey, sealed: string): Effect.Effect<Redacted.Redacted<string>, SecretBoxError> =>
  Effect.fromResult(openResult(key, sealed))

const invalidConfig = (why: string) =>
  new InvalidConfig({ keys: [keyName], detail: `${keyVariable} (${keyName}): ${why}` })

const generateHint = `base64 of ${keyBytes} random bytes, e.g. from "openssl rand -base64 ${keyBytes}"`

/**
 * `BOTHY_WEBHOOK_SECRET_KEY` as it is set: `None` when unset; set but empty is an `InvalidConfig`
 * (`BothyConfig.variable`), never a reason to fall back to another key.
 */
export const keySetting = variable(keyVariable, {
  key: keyName,
  unset: "to use the embedded server's key file (without DATABASE_URL only)",
})

/**
 * Reads the key from `BOTHY_WEBHOOK_SECRET_KEY`, in the shape of `BothyConfig.setting` but without
 * its `= "value"` part: a bad value is never quoted. It has no default, since a default key would be
 * a published one.
 */
export const loadKey: Effect.Effect<SecretKey, InvalidConfig> = keySetting.pipe(
  Effect.flatMap(
    Option.match({
      onNone: () => Effect.fail(invalidConfig(`is required: ${generateHint}`)),
      onSome: (raw) => Effect.mapError(parseKey(raw), (e) => invalidConfig(e.detail)),
    }),
  ),
)
