/**
 * One OAuth2 client-credentials token request (RFC 6749 §4.4): a POST of
 * `grant_type=client_credentials` to the token URL, the client authenticated with HTTP Basic
 * (§2.3.1), sent through `OutboundSender.send`, so the token URL passes the same target policy as
 * any webhook target (scheme, credentials, the address actually dialed) and the same limits.
 *
 * What it keeps true: the client secret and the token stay `Redacted`; an `OAuthTokenFailed` says
 * why in words an operator can act on (unreachable, refused with the server's OAuth error code,
 * an answer that is not a bearer token) and never holds the secret or a token, even when a token
 * server echoes the secret back in its error. Keeping a token and refreshing it is the caller's
 * (`EndpointTokens`).
 */
import { Effect, Redacted, Schema } from "effect"
import { send } from "./OutboundSender.ts"
import { redactUrl, type TargetPolicy } from "./OutboundTarget.ts"

export interface Grant {
  readonly tokenUrl: string
  readonly clientId: string
  readonly clientSecret: Redacted.Redacted<string>
  /** The `scope` parameter, when the token server wants one. */
  readonly scope: string | null
}

export interface AccessToken {
  readonly token: Redacted.Redacted<string>
  /** The lifetime the server gave (`expires_in`), or `defaultLifetimeMillis` when it gave none. */
  readonly lifetimeMillis: number
}

/** A token whose server gives no `expires_in` is kept this long: short, as nothing says more. */
export const defaultLifetimeMillis = 5 * 60_000

export class OAuthTokenFailed extends Schema.TaggedError<OAuthTokenFailed>()("OAuthTokenFailed", {
  /** The token URL, without any username or password. */
  tokenUrl: Schema.String,
  /**
   * `Unreachable`: no answer (refused by the target policy, DNS, connect, TLS, timeout);
   * `Refused`: an answer other than 2xx (a wrong client id or secret is usually 400 or 401
   * `invalid_client`); `BadResponse`: a 2xx that is not a bearer token.
   */
  reason: Schema.Literals(["Unreachable", "Refused", "BadResponse"]),
  status: Schema.NullOr(Schema.Int),
  /** Never holds the client secret or a token. */
  detail: Schema.String,
}) {
  override get message() {
    return `OAuth2 token request to ${this.tokenUrl} failed (${this.reason}${this.status === null ? "" : ` ${this.status}`}): ${this.detail}`
  }
}

const TokenResponse = Schema.Struct({
  access_token: Schema.String.check(Schema.isNonEmpty()),
  token_type: Schema.String,
  expires_in: Schema.optional(Schema.Finite),
})

const ErrorResponse = Schema.Struct({
  error: Schema.String,
  error_description: Schema.optional(Schema.String),
})

/** RFC 6749 §2.3.1: id and secret each form-urlencoded, then joined and base64'd. */
const basic = (grant: Grant) =>
  `Basic ${Buffer.from(
    `${encodeURIComponent(grant.clientId)}:${encodeURIComponent(Redacted.value(grant.clientSecret))}`,
  ).toString("base64")}`

const formBody = (grant: Grant) =>
  new URLSearchParams({
    grant_type: "client_credentials",
    ...(grant.scope === null ? {} : { scope: grant.scope }),
  }).toString()

const parseJson = (text: string): unknown => {
  try {
    return JSON.parse(text)
  } catch {
    return undefined
  }
}

/** What a refusal said, cut short, with the secret taken out should the server have echoed it. */
const refusalText = (grant: Grant, body: string) => {
  const parsed = Schema.decodeUnknownOption(ErrorResponse)(parseJson(body))
  const said =
    parsed._tag === "Some"
      ? `${parsed.value.error}${parsed.value.error_description === undefined ? "" : `: ${parsed.value.error_description}`}`
      : body.trim() === ""
        ? "no body"
        : body.trim()
  return said.replaceAll(Redacted.value(grant.clientSecret), "<redacted>").slice(0, 300)
}

/** Requests a token for `grant`; the token URL is judged by `policy` like any target. */
export const fetchToken = Effect.fn("OAuthClientCredentials.fetchToken")(function* (
  grant: Grant,
  policy: TargetPolicy,
) {
  const tokenUrl = redactUrl(grant.tokenUrl)
  const fail = (reason: OAuthTokenFailed["reason"], status: number | null, detail: string) =>
    Effect.fail(new OAuthTokenFailed({ tokenUrl, reason, status, detail }))
  const result = yield* send(
    {
      url: grant.tokenUrl,
      headers: {
        authorization: basic(grant),
        "content-type": "application/x-www-form-urlencoded",
        accept: "application/json",
      },
      body: formBody(grant),
    },
    policy,
  )
  if (result.status === undefined) {
    return yield* fail(
      "Unreachable",
      null,
      `${result.errorClass ?? "error"}${result.refusal === undefined ? "" : ` (${result.refusal})`}`,
    )
  }
  if (result.status < 200 || result.status >= 300) {
    return yield* fail("Refused", result.status, refusalText(grant, result.body))
  }
  const decoded = Schema.decodeUnknownOption(TokenResponse)(parseJson(result.body))
  if (decoded._tag === "None") {
    return yield* fail("BadResponse", result.status, "the answer is not JSON with an access_token and a token_type")
  }
  const { access_token, token_type, expires_in } = decoded.value
  if (token_type.toLowerCase() !== "bearer") {
    return yield* fail("BadResponse", result.status, `token_type is ${JSON.stringify(token_type)}, not Bearer`)
  }
  return {
    token: Redacted.make(access_token),
    lifetimeMillis: expires_in === undefined || expires_in <= 0 ? defaultLifetimeMillis : Math.floor(expires_in * 1000),
  } satisfies AccessToken
})
