/**
 * What sequencing in place needs (`EventLog.layerPostCommitInPlace`, `SequencerBatchInPlace`): a
 * producer inserts its events into `event_log` itself with a provisional, negative seq, and the
 * sequencer numbers them where they lie, so each event is written twice (insert, then its
 * numbering) instead of three times (into `event_log_pending`, out of it, into `event_log`). It was
 * measured beside the `post_commit` mode and not kept as it (docs/decisions.md); the append
 * benchmark runs it. Nothing here changes what the other modes do.
 *
 * - `event_log_append_ids`: an append's id (`event_log.append_id`, what `sequenced` looks up),
 *   started past `event_log_pending`'s so the ids of both placements never meet.
 * - `event_seq.unsequenced_from` / `unsequenced_after`: the bounds the last numbering batch read
 *   within (`UnsequencedBounds`), where the next lease holder starts. `-infinity` and 0: everything.
 * - `event_log_numbering_check`: fails a batch whose UPDATE numbered fewer events than it counted
 *   (another holder numbered them first), so that nothing of it commits.
 */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"

export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE SEQUENCE event_log_append_ids AS bigint`
  yield* sql`
    SELECT setval('event_log_append_ids', last_value + 1, false)
    FROM event_log_pending_id_seq`
  yield* sql`
    ALTER TABLE event_seq
      ADD COLUMN unsequenced_from timestamptz NOT NULL DEFAULT '-infinity',
      ADD COLUMN unsequenced_after bigint NOT NULL DEFAULT 0`
  yield* sql`
    CREATE FUNCTION event_log_numbering_check(picked bigint, numbered bigint) RETURNS bigint
    LANGUAGE plpgsql AS $$
    BEGIN
      IF picked <> numbered THEN
        RAISE EXCEPTION 'sequencer batch numbered % of % events: another sequencer numbered them first', numbered, picked
          USING ERRCODE = '40001';
      END IF;
      RETURN numbered;
    END $$`
})
