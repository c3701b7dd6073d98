/**
 * The OAuth 2.0 access token FCM HTTP v1 wants, from the service account by the JWT-bearer grant
 * (RFC 7523): an RS256 assertion (`iss` the account, `scope` firebase.messaging, `aud` the token
 * endpoint, an hour's `exp`) exchanged at Google's token endpoint.
 *
 * What it keeps true: a token is fetched once and shared by every request until `renewBefore`
 * ahead of its expiry (by `Clock`); requests that find it stale at the same moment wait for one
 * fetch, not one each. A refusal is a `FcmCredentialsRefused` (the account, the key or the
 * project is wrong: every message would fail), distinct from no answer at all (retried).
 */
import { Clock, Duration, Effect, Redacted, Schema, Semaphore } from "effect"
import * as CompactJwt from "./CompactJwt.ts"
import { type NativeHttp2, NativeTransportError } from "./NativeHttp2.ts"
import { type FcmCredentials, fcmOrigins } from "./NativePushConfig.ts"

export const scope = "https://www.googleapis.com/auth/firebase.messaging"
export const tokenPath = "/token"
export const grantType = "urn:ietf:params:oauth:grant-type:jwt-bearer"

/** Ahead of expiry, a token is fetched anew: a request in flight must not carry one that lapses. */
export const renewBefore = Duration.minutes(5)

export class FcmCredentialsRefused extends Schema.TaggedError<FcmCredentialsRefused>()("FcmCredentialsRefused", {
  status: Schema.Number,
  detail: Schema.String,
}) {
  override get message() {
    return `Google's token endpoint refused the service account (${this.status}): ${this.detail}`
  }
}

export interface AccessToken {
  readonly authorization: Effect.Effect<string, FcmCredentialsRefused | NativeTransportError>
  /** Forgets the token (the send endpoint refused it): the next request fetches one. */
  readonly forget: Effect.Effect<void>
  /** Tokens fetched so far (what the reuse check counts). */
  readonly fetched: () => number
}

const TokenAnswer = Schema.Struct({ access_token: Schema.String, expires_in: Schema.Finite })

export const make = Effect.fnUntraced(function* (credentials: FcmCredentials, http: NativeHttp2) {
  const origin = credentials.origins?.token ?? fcmOrigins.token
  const lock = yield* Semaphore.make(1)
  let current: { readonly header: string; readonly renewAt: number } | undefined
  let fetched = 0

  const fetch = Effect.gen(function* () {
    const now = yield* Clock.currentTimeMillis
    const iat = Math.floor(now / 1000)
    const assertion = CompactJwt.sign(
      "RS256",
      Redacted.value(credentials.privateKey),
      { typ: "JWT", ...(credentials.privateKeyId === undefined ? {} : { kid: credentials.privateKeyId }) },
      { iss: credentials.clientEmail, scope, aud: `${origin}${tokenPath}`, iat, exp: iat + 3600 },
    )
    const answer = yield* http.request(origin, {
      method: "POST",
      path: tokenPath,
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({ grant_type: grantType, assertion }).toString(),
    })
    fetched++
    if (answer.status >= 500 || answer.status === 429) {
      return yield* new NativeTransportError({ origin, reason: `the token endpoint answered ${answer.status}` })
    }
    const parsed = Schema.decodeUnknownOption(Schema.fromJsonString(TokenAnswer))(answer.body)
    if (answer.status !== 200 || parsed._tag === "None") {
      const error = /"error"\s*:\s*"([^"]{1,80})"/.exec(answer.body)?.[1] ?? "no access token in the answer"
      return yield* new FcmCredentialsRefused({ status: answer.status, detail: error })
    }
    const lifetime = parsed.value.expires_in * 1000
    current = {
      header: `Bearer ${parsed.value.access_token}`,
      renewAt: now + Math.max(lifetime / 2, lifetime - Duration.toMillis(renewBefore)),
    }
    return current.header
  })

  const fresh = (now: number) => (current !== undefined && now < current.renewAt ? current.header : undefined)
  const authorization = Effect.flatMap(Clock.currentTimeMillis, (now) => {
    const header = fresh(now)
    if (header !== undefined) return Effect.succeed(header)
    // Whoever waited for the lock finds the token the holder fetched.
    return lock.withPermit(
      Effect.suspend(() =>
        Effect.flatMap(Clock.currentTimeMillis, (t) => {
          const again = fresh(t)
          return again === undefined ? fetch : Effect.succeed(again)
        }),
      ),
    )
  })

  const forget = Effect.sync(() => {
    current = undefined
  })
  return { authorization, forget, fetched: () => fetched } satisfies AccessToken
})
