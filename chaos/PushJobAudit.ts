/**
 * Whom each push job carried, kept by the harness. A batch job rewrites its registrations to what
 * is still left as it runs (`JobProgress`), so its finished row no longer says whom it was for;
 * the verdict needs (registration, event) -> job. A trigger on `jobs` records, as each push job is
 * inserted, every registration it carries and whether the consumer's round made it (it has a
 * unique key) or a running job split it off (it has none). An instrument of the harness on its own
 * database, not part of bothy: what it records is written by PostgreSQL in the inserting
 * transaction, so it holds exactly for the jobs that committed.
 */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"

const statements = [
  `CREATE TABLE chaos_push_job_registrations (
     job_id bigint NOT NULL, registration text NOT NULL, seq text NOT NULL, by_round boolean NOT NULL)`,
  `CREATE INDEX ON chaos_push_job_registrations (registration, seq, job_id)`,
  `CREATE FUNCTION chaos_push_job_audit() RETURNS trigger LANGUAGE plpgsql AS $$
   BEGIN
     INSERT INTO chaos_push_job_registrations (job_id, registration, seq, by_round)
     SELECT NEW.id, r, NEW.args ->> 'seq', NEW.unique_key IS NOT NULL
     FROM jsonb_array_elements_text(
       CASE WHEN NEW.args ? 'registrations' THEN NEW.args -> 'registrations'
            ELSE jsonb_build_array(NEW.args -> 'registration') END) AS r;
     RETURN NULL;
   END $$`,
  `CREATE TRIGGER chaos_push_job_audit AFTER INSERT ON jobs FOR EACH ROW
   WHEN (NEW.kind IN ('push.batch', 'push.deliver')) EXECUTE FUNCTION chaos_push_job_audit()`,
]

/** Installs the trigger; before any worker runs. */
export const install = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  for (const statement of statements) yield* sql.unsafe(statement)
})

/**
 * One row per (registration, event) per job the round made for it (two rows: a duplicate), each
 * with the state of the last job that carried the registration for that event (a split-off job,
 * when its push service throttled it).
 */
export const read = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  return yield* sql<{
    registration: string
    seq: string
    state: string
    finalized: Date | null
    errors: unknown
  }>`
    SELECT a.registration, a.seq, coalesce(j.state::text, 'deleted') AS state,
           j.finalized_at AS finalized, j.errors
    FROM chaos_push_job_registrations AS a
    CROSS JOIN LATERAL (
      SELECT max(l.job_id) AS job_id FROM chaos_push_job_registrations AS l
      WHERE l.registration = a.registration AND l.seq = a.seq AND l.job_id >= a.job_id) AS last
    LEFT JOIN jobs AS j ON j.id = last.job_id
    WHERE a.by_round`
})
