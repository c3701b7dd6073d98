/**
 * How a subscription's endpoint wants to be reached beyond the signature
 * (src/webhooks/subscriptions/EndpointCredentials.ts):
 *
 * - OAuth2 client credentials: `auth_token_url`, `auth_client_id`, the client secret sealed like
 *   the signing secret (`auth_client_secret_sealed`), and an optional `auth_scope`. All three of
 *   the first or none: a half-set grant could never fetch a token.
 * - mTLS: the client certificate and its key, sealed together as one JSON text
 *   (`tls_client_sealed`), so a dump reveals neither.
 * - A custom CA: the PEM certificates (`tls_ca`) trusted for the endpoint instead of the system's.
 *   Certificates are public, so they are stored as they are.
 *
 * Each is checked in code (PEM parses, the key matches the certificate, the token URL passes the
 * target policy) before it is written.
 */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"

export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    ALTER TABLE webhook_subscriptions
      ADD COLUMN auth_token_url text,
      ADD COLUMN auth_client_id text,
      ADD COLUMN auth_client_secret_sealed text,
      ADD COLUMN auth_scope text,
      ADD COLUMN tls_client_sealed text,
      ADD COLUMN tls_ca text,
      ADD CONSTRAINT webhook_subscriptions_auth_complete CHECK (
        (auth_token_url IS NULL) = (auth_client_id IS NULL)
        AND (auth_token_url IS NULL) = (auth_client_secret_sealed IS NULL)
        AND (auth_scope IS NULL OR auth_token_url IS NOT NULL))`
})
