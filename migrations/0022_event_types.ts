/**
 * The event-type catalog (src/log/EventTypeCatalog.ts): one row per known type, with its
 * description, the JSON Schema of its payload, an example, and two flags: `deprecated` (shown to
 * receivers) and `validated` (appends of the type whose payload breaks the schema are refused;
 * only with a schema). `event_type_catalog` holds the catalog's version, bumped by every change in
 * the same transaction: an append checks in its own statement that it validated against the
 * version its snapshot sees (src/log/EventTypeValidation.ts).
 */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"

export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE event_types (
      name text PRIMARY KEY,
      description text NOT NULL DEFAULT '',
      schema jsonb,
      example jsonb,
      deprecated boolean NOT NULL DEFAULT false,
      validated boolean NOT NULL DEFAULT false,
      updated_at timestamptz NOT NULL DEFAULT clock_timestamp(),
      CHECK (NOT validated OR schema IS NOT NULL)
    )`
  yield* sql`
    CREATE TABLE event_type_catalog (
      id boolean PRIMARY KEY DEFAULT true CHECK (id),
      version bigint NOT NULL DEFAULT 0
    )`
  yield* sql`INSERT INTO event_type_catalog DEFAULT VALUES`
})
