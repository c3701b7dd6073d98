/**
 * What a subscription's endpoint may ask beyond the signature, as a caller gives it, as it is
 * stored and as it is shown:
 *
 * - `auth`: OAuth2 client credentials (token URL, client id, client secret, optional scope); each
 *   request carries `Authorization: Bearer <token>` (`EndpointTokens` keeps the token).
 * - `mtls`: a client certificate (PEM, chain allowed) and its key, presented in every handshake.
 * - `ca`: certificates (PEM) trusted for the endpoint instead of the system's, for a private PKI.
 *
 * What it keeps true:
 * - Nothing unusable is stored: certificates and keys parse, the key matches the certificate
 *   and is not encrypted, the certificate has not expired, and the token URL passes the target
 *   policy (https, or http to loopback only where the policy allows it). A refusal is an
 *   `InvalidEndpointCredentials` naming the field, which never quotes a key, a secret or a PEM.
 * - The client secret and the key stay `Redacted` and are stored sealed (`SecretBox`, like the
 *   signing secret); the certificate is sealed with its key. None of them is ever shown again:
 *   a subscription shows `auth` without the secret, and only whether `mtls` and `ca` are set.
 */
import { createPrivateKey, type KeyObject, X509Certificate } from "node:crypto"
import { Clock, Effect, Redacted, Result, Schema } from "effect"
import * as SecretBox from "../../crypto/SecretBox.ts"
import { type TargetPolicy, validateUrl } from "../../outbound/OutboundTarget.ts"
import { storableCheck } from "../../platform/StorableText.ts"

/** The longest PEM text taken (a certificate chain, a key, a CA bundle). */
export const maxPemBytes = 64 * 1024

const Text = (max: number) => Schema.String.check(Schema.isNonEmpty(), Schema.isMaxLength(max), storableCheck)
const Pem = Text(maxPemBytes)

export const OAuthInput = Schema.Struct({
  type: Schema.Literal("oauth2"),
  tokenUrl: Text(2048),
  clientId: Text(500),
  /** Checked by `check` rather than here, so that no message can quote any of it. */
  clientSecret: Schema.Redacted(Schema.String),
  /** The `scope` parameter of the token request; absent: none. */
  scope: Schema.optional(Text(1000)),
})
export type OAuthInput = typeof OAuthInput.Type

export const MtlsInput = Schema.Struct({ cert: Pem, key: Schema.Redacted(Schema.String) })
export type MtlsInput = typeof MtlsInput.Type

/** The fields a create or update takes; absent: unchanged (none at creation), null: removed. */
export const fields = {
  auth: Schema.optional(Schema.NullOr(OAuthInput)),
  mtls: Schema.optional(Schema.NullOr(MtlsInput)),
  ca: Schema.optional(Schema.NullOr(Pem)),
}

/** How a subscription shows its endpoint credentials: never a secret, a key or a PEM. */
export interface EndpointAuthView {
  readonly auth: {
    readonly type: "oauth2"
    readonly tokenUrl: string
    readonly clientId: string
    readonly scope: string | null
  } | null
  readonly mtls: boolean
  readonly ca: boolean
}

export class InvalidEndpointCredentials extends Schema.TaggedError<InvalidEndpointCredentials>()(
  "InvalidEndpointCredentials",
  {
    /** `auth.tokenUrl`, `mtls.cert`, `mtls.key` or `ca`. */
    field: Schema.String,
    reason: Schema.Literals([
      "BadSecret",
      "BadCertificate",
      "BadKey",
      "KeyDoesNotMatch",
      "CertificateExpired",
      "BadCa",
      "UnsafeTokenUrl",
    ]),
    /** Never quotes a key, a secret or a PEM. */
    detail: Schema.String,
  },
) {
  override get message() {
    return `invalid endpoint credentials at ${this.field} (${this.reason}): ${this.detail}`
  }
}

const certificateBlock = /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g

/** Every certificate of a PEM text, or why not: none found, or one that does not parse. */
const certificates = (pem: string): Result.Result<ReadonlyArray<X509Certificate>, string> => {
  const blocks = pem.match(certificateBlock) ?? []
  if (blocks.length === 0) return Result.fail("no PEM certificate (-----BEGIN CERTIFICATE-----) found")
  const parsed: Array<X509Certificate> = []
  for (const [i, block] of blocks.entries()) {
    try {
      parsed.push(new X509Certificate(block))
    } catch {
      return Result.fail(`certificate ${i + 1} of ${blocks.length} does not parse as X.509`)
    }
  }
  return Result.succeed(parsed)
}

const privateKey = (pem: Redacted.Redacted<string>): Result.Result<KeyObject, string> => {
  try {
    return Result.succeed(createPrivateKey({ key: Redacted.value(pem), format: "pem" }))
  } catch (e) {
    // Node's messages name the problem, never the key's bytes; an encrypted key asks for a passphrase.
    const code = typeof e === "object" && e !== null && "code" in e ? String(e.code) : ""
    return Result.fail(
      code === "ERR_MISSING_PASSPHRASE"
        ? "the key is encrypted; give it unencrypted (it is stored sealed)"
        : "not a PEM private key (PKCS#8, PKCS#1 or SEC1)",
    )
  }
}

const refuse = (field: string, reason: InvalidEndpointCredentials["reason"], detail: string) =>
  Effect.fail(new InvalidEndpointCredentials({ field, reason, detail }))

/** The longest client secret taken. */
export const maxSecretLength = 2000

const checkSecret = (secret: Redacted.Redacted<string>) => {
  const text = Redacted.value(secret)
  return text.length === 0 || text.length > maxSecretLength
    ? refuse("auth.clientSecret", "BadSecret", `a client secret has 1 to ${maxSecretLength} characters`)
    : Effect.void
}

const checkMtls = (mtls: MtlsInput) =>
  Effect.gen(function* () {
    if (Redacted.value(mtls.key).length > maxPemBytes) {
      return yield* refuse("mtls.key", "BadKey", `a key has at most ${maxPemBytes} characters`)
    }
    const chain = certificates(mtls.cert)
    if (Result.isFailure(chain)) return yield* refuse("mtls.cert", "BadCertificate", chain.failure)
    const key = privateKey(mtls.key)
    if (Result.isFailure(key)) return yield* refuse("mtls.key", "BadKey", key.failure)
    const leaf = chain.success[0]!
    if (!leaf.checkPrivateKey(key.success)) {
      return yield* refuse(
        "mtls.key",
        "KeyDoesNotMatch",
        `the key is not the one of the certificate for ${leaf.subject.replaceAll("\n", ", ")}`,
      )
    }
    const now = yield* Clock.currentTimeMillis
    if (leaf.validToDate.getTime() <= now) {
      return yield* refuse(
        "mtls.cert",
        "CertificateExpired",
        `the certificate expired at ${leaf.validToDate.toISOString()}`,
      )
    }
  })

const checkCa = (ca: string) => {
  const parsed = certificates(ca)
  return Result.isFailure(parsed) ? refuse("ca", "BadCa", parsed.failure) : Effect.void
}

/** What a create or update gives, as decoded. */
export interface CredentialsInput {
  readonly auth?: OAuthInput | null | undefined
  readonly mtls?: MtlsInput | null | undefined
  readonly ca?: string | null | undefined
}

/** The input's credentials checked against `policy`; nothing is written. */
export const check = (input: CredentialsInput, policy: TargetPolicy) =>
  Effect.gen(function* () {
    if (input.auth != null) {
      yield* checkSecret(input.auth.clientSecret)
      yield* validateUrl(input.auth.tokenUrl, policy).pipe(
        Effect.mapError(
          (e) =>
            new InvalidEndpointCredentials({
              field: "auth.tokenUrl",
              reason: "UnsafeTokenUrl",
              detail: `${e.reason}: ${e.detail}`,
            }),
        ),
      )
    }
    if (input.mtls != null) yield* checkMtls(input.mtls)
    if (input.ca != null) yield* checkCa(input.ca)
  })

/** The stored columns; `undefined`: leave as stored (an update that does not name the field). */
export interface Columns {
  readonly auth:
    | {
        readonly tokenUrl: string
        readonly clientId: string
        readonly secretSealed: string
        readonly scope: string | null
      }
    | null
    | undefined
  readonly tlsClientSealed: string | null | undefined
  readonly tlsCa: string | null | undefined
}

/** Seals what is secret; the certificate goes with its key, as one JSON text. */
export const columns = (key: SecretBox.SecretKey, input: CredentialsInput): Columns => ({
  auth:
    input.auth == null
      ? input.auth
      : {
          tokenUrl: new URL(input.auth.tokenUrl).href,
          clientId: input.auth.clientId,
          secretSealed: SecretBox.seal(key, input.auth.clientSecret),
          scope: input.auth.scope ?? null,
        },
  tlsClientSealed:
    input.mtls == null
      ? input.mtls
      : SecretBox.seal(
          key,
          Redacted.make(JSON.stringify({ cert: input.mtls.cert, key: Redacted.value(input.mtls.key) })),
        ),
  tlsCa: input.ca,
})

/** A sealed client identity as the drainer opens it. */
export const ClientIdentity = Schema.fromJsonString(Schema.Struct({ cert: Schema.String, key: Schema.String }))
