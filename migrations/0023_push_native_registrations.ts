/**
 * Native push: a registration is of one of three kinds, and the row holds what its kind needs.
 *
 * - `webpush`: the browser's endpoint and keys, as before (every row before this migration).
 * - `apns`: a device token, the app's bundle id as `topic`, and `environment` (`sandbox` or
 *   `production`: a token belongs to one of Apple's two environments).
 * - `fcm`: a registration token.
 *
 * A CHECK holds each kind to its columns, so a row can never be half one kind and half another.
 * One row per (kind, token), as one row per endpoint: registering a device again refreshes it
 * under whoever registered it last. NULL tokens (the Web Push rows) never conflict.
 */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"

export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    ALTER TABLE push_registrations
      ADD COLUMN kind text NOT NULL DEFAULT 'webpush',
      ADD COLUMN token text,
      ADD COLUMN topic text,
      ADD COLUMN environment text,
      ALTER COLUMN endpoint DROP NOT NULL,
      ALTER COLUMN p256dh DROP NOT NULL,
      ALTER COLUMN auth DROP NOT NULL`
  yield* sql`
    ALTER TABLE push_registrations ADD CONSTRAINT push_registrations_kind CHECK (
      (kind = 'webpush' AND endpoint IS NOT NULL AND p256dh IS NOT NULL AND auth IS NOT NULL
        AND token IS NULL AND topic IS NULL AND environment IS NULL)
      OR (kind = 'apns' AND token IS NOT NULL AND topic IS NOT NULL AND environment IN ('sandbox', 'production')
        AND endpoint IS NULL AND p256dh IS NULL AND auth IS NULL)
      OR (kind = 'fcm' AND token IS NOT NULL
        AND endpoint IS NULL AND p256dh IS NULL AND auth IS NULL AND topic IS NULL AND environment IS NULL)
    )`
  yield* sql`ALTER TABLE push_registrations ADD CONSTRAINT push_registrations_token UNIQUE (kind, token)`
})
