/**
 * A drainer lets its slot go in one round trip: `webhook_drain_release(subscription, job)` locks
 * the drain row, then, in a statement of its own (a VOLATILE function takes a fresh snapshot per
 * statement, so it sees every round that held the lock before), frees the slot only if nothing is
 * pending. As separate statements in a client transaction it held the row lock, which the next
 * `webhooks` round needs, for three round trips and a WAL flush.
 *
 * The commit does not wait for its WAL flush: a release lost in a server crash leaves the slot to
 * a job that either completed after it (then that completion's flush, later in the WAL, did not
 * happen either, and the job runs again) or left it free anyway.
 *
 * Returns `released`, `pending` (keep draining) or `lost` (another job holds the slot).
 */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"

export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE FUNCTION webhook_drain_release(subscription uuid, job bigint) RETURNS text
    LANGUAGE plpgsql VOLATILE AS $$
    DECLARE
      holder bigint;
    BEGIN
      PERFORM set_config('synchronous_commit', 'off', true);
      SELECT job_id INTO holder FROM webhook_drains WHERE subscription_id = subscription FOR UPDATE;
      IF NOT FOUND OR holder IS DISTINCT FROM job THEN
        RETURN 'lost';
      END IF;
      UPDATE webhook_drains SET job_id = NULL
      WHERE subscription_id = subscription AND job_id = job
        AND NOT EXISTS (
          SELECT 1 FROM webhook_deliveries AS d WHERE d.subscription_id = subscription AND d.state = 'pending');
      RETURN CASE WHEN FOUND THEN 'released' ELSE 'pending' END;
    END $$`
})
