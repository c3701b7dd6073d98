/**
 * The `subscriptions create` and `update` flags for endpoint credentials (OAuth2 client
 * credentials, a client certificate, a custom CA), and how a subscription's are printed.
 *
 * What it keeps true: a client secret or key is never taken on the command line, where `ps` and
 * shell history would keep it: they are read from files (`--oauth-client-secret-file`,
 * `--client-key-file`), wrapped in `Redacted` at once, and never printed; the printout says only
 * which credentials are set.
 */
import { Option, Redacted } from "effect"
import { Flag } from "effect/cli"
import type { Subscription } from "../webhooks/subscriptions/WebhookSubscriptions.ts"

export const flags = {
  oauthTokenUrl: Flag.String("oauth-token-url").pipe(
    Flag.withDescription("OAuth2 client credentials: the token URL (https)"),
    Flag.optional,
  ),
  oauthClientId: Flag.String("oauth-client-id").pipe(
    Flag.withDescription("OAuth2 client credentials: the client id"),
    Flag.optional,
  ),
  oauthClientSecretFile: Flag.FileText("oauth-client-secret-file").pipe(
    Flag.withDescription("OAuth2 client credentials: a file holding the client secret (one line)"),
    Flag.optional,
  ),
  oauthScope: Flag.String("oauth-scope").pipe(
    Flag.withDescription("OAuth2 client credentials: the scope to ask for"),
    Flag.optional,
  ),
  clientCertFile: Flag.FileText("client-cert-file").pipe(
    Flag.withDescription("mTLS: a PEM file with the client certificate (chain allowed)"),
    Flag.optional,
  ),
  clientKeyFile: Flag.FileText("client-key-file").pipe(
    Flag.withDescription("mTLS: a PEM file with the client certificate's unencrypted key"),
    Flag.optional,
  ),
  caFile: Flag.FileText("ca-file").pipe(
    Flag.withDescription("a PEM file with the CA certificates trusted for the endpoint instead of the system's"),
    Flag.optional,
  ),
}

/** `update`'s flags that remove credentials. */
export const clearFlags = {
  clearOauth: Flag.Boolean("clear-oauth").pipe(
    Flag.withDescription("remove the OAuth2 client credentials"),
    Flag.withDefault(false),
  ),
  clearMtls: Flag.Boolean("clear-mtls").pipe(
    Flag.withDescription("remove the client certificate"),
    Flag.withDefault(false),
  ),
  clearCa: Flag.Boolean("clear-ca").pipe(Flag.withDescription("remove the custom CA"), Flag.withDefault(false)),
}

type Given = {
  readonly [K in keyof typeof flags]: Option.Option<string>
}

type Clear = { readonly clearOauth: boolean; readonly clearMtls: boolean; readonly clearCa: boolean }

const noClear: Clear = { clearOauth: false, clearMtls: false, clearCa: false }

/**
 * The credential fields of a create or update from the flags: a credential whose flags are all
 * absent is left out (unchanged); one given in part is passed as given, so that
 * `WebhookSubscriptions` refuses what is missing, naming the field.
 */
export const fieldsOf = (given: Given, clear: Clear = noClear) => {
  const some = (o: Option.Option<string>) => Option.isSome(o)
  const auth = clear.clearOauth
    ? { auth: null }
    : some(given.oauthTokenUrl) || some(given.oauthClientId) || some(given.oauthClientSecretFile)
      ? {
          auth: {
            type: "oauth2" as const,
            tokenUrl: Option.getOrElse(given.oauthTokenUrl, () => ""),
            clientId: Option.getOrElse(given.oauthClientId, () => ""),
            // A file usually ends in a newline that is not part of the secret.
            clientSecret: Redacted.make(Option.getOrElse(given.oauthClientSecretFile, () => "").trim()),
            ...(Option.isSome(given.oauthScope) ? { scope: given.oauthScope.value } : {}),
          },
        }
      : {}
  const mtls = clear.clearMtls
    ? { mtls: null }
    : some(given.clientCertFile) || some(given.clientKeyFile)
      ? {
          mtls: {
            cert: Option.getOrElse(given.clientCertFile, () => ""),
            key: Redacted.make(Option.getOrElse(given.clientKeyFile, () => "")),
          },
        }
      : {}
  const ca = clear.clearCa ? { ca: null } : Option.isSome(given.caFile) ? { ca: given.caFile.value } : {}
  return { ...auth, ...mtls, ...ca }
}

/** The printout's lines about credentials: which are set, never a secret. */
export const lines = (s: Subscription): ReadonlyArray<readonly [string, string]> => [
  [
    "endpoint auth",
    s.auth === null
      ? "none"
      : `oauth2, client ${s.auth.clientId} at ${s.auth.tokenUrl}${s.auth.scope === null ? "" : ` (scope ${s.auth.scope})`}`,
  ],
  ["client certificate", s.mtls ? "set" : "none"],
  ["custom CA", s.ca ? "set" : "none"],
]
