/**
 * What the `webhooks` round matches a subscription with, beside its space scope:
 *
 * - `type_patterns`: LIKE patterns derived from `event_types` (exact types and patterns such as
 *   `order.*`; `{%}` for every type), see src/webhooks/subscriptions/EventTypePatterns.ts. Existing
 *   rows get theirs from their exact types, `_` escaped.
 * - `filter`: the payload filter as given (NULL: every payload), and `filter_path`, its compiled
 *   SQL/JSON path predicate, which the round evaluates as `payload @@ filter_path`
 *   (src/webhooks/subscriptions/PayloadFilter.ts). Both or neither.
 */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"

export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    ALTER TABLE webhook_subscriptions
      ADD COLUMN type_patterns text[] NOT NULL DEFAULT '{%}',
      ADD COLUMN filter jsonb,
      ADD COLUMN filter_path jsonpath,
      ADD CONSTRAINT webhook_subscriptions_filter_compiled CHECK ((filter IS NULL) = (filter_path IS NULL))`
  yield* sql`
    UPDATE webhook_subscriptions
    SET type_patterns = ARRAY(SELECT replace(t, '_', '\\_') FROM unnest(event_types) AS t)
    WHERE cardinality(event_types) > 0`
})
