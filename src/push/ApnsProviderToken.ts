/**
 * The APNs provider token: an ES256 JWT (`kid` the key id, `iss` the team id, `iat` the time of
 * signing) that authorizes every request on the key's connections.
 *
 * What it keeps true: one token is signed and then reused by every request until it is
 * `renewAfter` old (by `Clock`), within Apple's window: APNs refuses a token older than an hour
 * (`403 ExpiredProviderToken`) and one renewed more often than every 20 minutes
 * (`429 TooManyProviderTokenUpdates`). Never one per request.
 */
import { Clock, Duration, Effect, Redacted } from "effect"
import * as CompactJwt from "./CompactJwt.ts"
import type { ApnsCredentials } from "./NativePushConfig.ts"

/** Halfway through Apple's window, so that clock skew either way stays inside it. */
export const renewAfter = Duration.minutes(40)

export interface ProviderToken {
  /** The `authorization` header's value: `bearer <jwt>`. */
  readonly authorization: Effect.Effect<string>
  /** How many tokens were signed so far (what the renewal test counts). */
  readonly signed: () => number
}

export const make = (credentials: ApnsCredentials): ProviderToken => {
  let current: { readonly header: string; readonly at: number } | undefined
  let signed = 0
  const age = Duration.toMillis(renewAfter)
  const authorization = Effect.map(Clock.currentTimeMillis, (now) => {
    if (current === undefined || now - current.at >= age || now < current.at) {
      const jwt = CompactJwt.sign(
        "ES256",
        Redacted.value(credentials.key),
        { kid: credentials.keyId },
        { iss: credentials.teamId, iat: Math.floor(now / 1000) },
      )
      signed++
      current = { header: `bearer ${jwt}`, at: now }
    }
    return current.header
  })
  return { authorization, signed: () => signed }
}
