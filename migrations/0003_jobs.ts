/**
 * The job table, modelled on River's: consumers insert rows inside their round's transaction, and
 * job workers claim runnable rows with FOR UPDATE SKIP LOCKED over a partial index.
 *
 * `unique_key` is the second line of defence against a duplicate insert (a consumer derives it from
 * consumer, event seq and receiver): a conflicting insert is a no-op.
 */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"

export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TYPE job_state AS ENUM
      ('available', 'scheduled', 'running', 'retryable', 'completed', 'cancelled', 'discarded')`
  yield* sql`
    CREATE TABLE jobs (
      id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      kind text NOT NULL CHECK (length(kind) BETWEEN 1 AND 128),
      queue text NOT NULL DEFAULT 'default' CHECK (length(queue) BETWEEN 1 AND 128),
      args jsonb NOT NULL DEFAULT '{}',
      state job_state NOT NULL DEFAULT 'available',
      attempt smallint NOT NULL DEFAULT 0 CHECK (attempt >= 0),
      max_attempts smallint NOT NULL DEFAULT 25 CHECK (max_attempts > 0),
      priority smallint NOT NULL DEFAULT 1 CHECK (priority BETWEEN 1 AND 4),
      created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
      scheduled_at timestamptz NOT NULL DEFAULT clock_timestamp(),
      attempted_at timestamptz,
      attempted_by text,
      finalized_at timestamptz,
      errors jsonb NOT NULL DEFAULT '[]',
      unique_key text,
      trace_parent text,
      CHECK ((state IN ('completed', 'cancelled', 'discarded')) = (finalized_at IS NOT NULL))
    )`
  yield* sql`CREATE UNIQUE INDEX jobs_unique_key ON jobs (unique_key) WHERE unique_key IS NOT NULL`
  yield* sql`
    CREATE INDEX jobs_runnable ON jobs (queue, priority, scheduled_at, id)
    WHERE state IN ('available', 'scheduled', 'retryable')`
  yield* sql`CREATE INDEX jobs_finalized ON jobs (finalized_at) WHERE finalized_at IS NOT NULL`
})
