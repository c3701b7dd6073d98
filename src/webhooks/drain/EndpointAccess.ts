/**
 * What a request needs to reach its endpoint besides the signed body: the run's opened secrets,
 * the connections of the endpoint's TLS identity (client certificate, custom CA), and the
 * OAuth2 bearer token its endpoint wants (`EndpointCredentials`).
 *
 * What it keeps true:
 * - Sealed texts are opened once per run and stay `Redacted`; one that does not open is a
 *   `SecretBoxError` the operator hears of (once a minute), and nothing is sent.
 * - A request goes out only on connections made for exactly its subscription's TLS identity, as
 *   read with that very delivery (`IdentityConnections`): a certificate changed by an update gets
 *   new connections, never a connection opened with the old one.
 * - Tokens come from the worker's `EndpointTokens`, keyed by everything the grant is made of, so
 *   a changed secret or token URL never reuses a token of the old one.
 */
import { Effect, Option, Redacted, Schema } from "effect"
import * as SecretBox from "../../crypto/SecretBox.ts"
import * as OAuthClientCredentials from "../../outbound/OAuthClientCredentials.ts"
import type { Connections } from "../../outbound/OutboundSender.ts"
import { ClientIdentity } from "../subscriptions/EndpointCredentials.ts"
import type { Drain } from "./Drain.ts"
import type { Run } from "./DrainRunState.ts"
import * as RunState from "./DrainRunState.ts"
import type { PendingDelivery } from "./PendingDeliveries.ts"

/** Opens a sealed secret once per run; one that does not open is the operator's to hear of. */
export const openSecret = (
  drain: Drain,
  run: Run,
  sealed: string,
): Effect.Effect<Redacted.Redacted<string>, SecretBox.SecretBoxError> => {
  // Opened once per run: every later delivery takes the kept one without an Effect step more.
  const known = run.secrets.get(sealed)
  if (known !== undefined) return Effect.succeed(known)
  return SecretBox.open(drain.config.secretKey, sealed).pipe(
    Effect.tapError((e) =>
      drain.warn(run.subscriptionId, `webhooks: subscription ${run.subscriptionId}: ${e.message}; nothing is sent`),
    ),
    Effect.tap((opened) => Effect.sync(() => RunState.secretOpened(run, sealed, opened))),
  )
}

const decodeIdentity = Schema.decodeUnknownEffect(ClientIdentity)

/** The connections for `d`'s endpoint: its client certificate and CA, or neither. */
export const connectionsFor = (
  drain: Drain,
  run: Run,
  d: PendingDelivery,
): Effect.Effect<Connections, SecretBox.SecretBoxError> => {
  // Most endpoints have no client certificate and no CA of their own: their pool, with no step more.
  if (d.tlsClientSealed === null && d.tlsCa === null) return run.connections.of("\u0000", () => ({}))
  return Effect.gen(function* () {
    const sealed = d.tlsClientSealed
    const identity =
      sealed === null
        ? undefined
        : yield* Effect.flatMap(openSecret(drain, run, sealed), (text) =>
            decodeIdentity(Redacted.value(text)).pipe(
              // Sealed by us from checked input: a text that opens and does not decode was altered.
              Effect.mapError(
                () =>
                  new SecretBox.SecretBoxError({
                    reason: "Malformed",
                    detail: "the client certificate's sealed text is not what bothy seals",
                  }),
              ),
            ),
          )
    const key = `${sealed ?? ""}\u0000${d.tlsCa ?? ""}`
    return yield* run.connections.of(key, () => ({
      ...(d.tlsCa === null ? {} : { trustOnly: d.tlsCa }),
      ...(identity === undefined
        ? {}
        : { clientCertificate: { cert: identity.cert, key: Redacted.make(identity.key) } }),
    }))
  })
}

/** Everything a grant is made of: a token is kept per key. */
const grantKey = (run: Run, d: PendingDelivery) =>
  [run.subscriptionId, d.authTokenUrl, d.authClientId, d.authSecretSealed, d.authScope ?? ""].join("\u0000")

/**
 * The bearer token for `d`'s endpoint, or none when it wants none. With `stale` (the token a 401
 * answered), that token is replaced first, once for every caller holding it.
 */
export const bearer = (
  drain: Drain,
  run: Run,
  d: PendingDelivery,
  stale?: Redacted.Redacted<string>,
): Effect.Effect<
  Option.Option<Redacted.Redacted<string>>,
  OAuthClientCredentials.OAuthTokenFailed | SecretBox.SecretBoxError
> => {
  if (d.authTokenUrl === null || d.authClientId === null || d.authSecretSealed === null) return noToken
  const { authTokenUrl, authClientId, authSecretSealed } = d
  return Effect.gen(function* () {
    const grant: OAuthClientCredentials.Grant = {
      tokenUrl: authTokenUrl,
      clientId: authClientId,
      clientSecret: yield* openSecret(drain, run, authSecretSealed),
      scope: d.authScope,
    }
    const token = yield* drain.tokens.token(
      grantKey(run, d),
      OAuthClientCredentials.fetchToken(grant, drain.config.policy),
      stale,
    )
    return Option.some(token)
  })
}

const noToken = Effect.succeed(Option.none<Redacted.Redacted<string>>())
