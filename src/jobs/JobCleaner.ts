/**
 * Removes finished jobs after their retention, in bounded batches so that a large backlog never
 * becomes one long transaction. The only completed jobs left to it are those with a unique key
 * (the others are deleted as they complete, see `JobFinalize`); they go quickly, once a duplicate
 * insert is no longer to be feared. Cancelled and discarded ones stay longer for inspection.
 */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"
import * as SqlInterval from "../platform/SqlInterval.ts"

export const clean = Effect.fnUntraced(function* (completedMillis: number, deadMillis: number, batch = 10_000) {
  const sql = yield* SqlClient.SqlClient
  let removed = 0
  for (;;) {
    const [row] = yield* sql<{ n: number }>`
      WITH doomed AS (
        SELECT id FROM jobs
        WHERE (state = 'completed' AND finalized_at < clock_timestamp() - ${SqlInterval.millis(sql, completedMillis)})
           OR (state IN ('cancelled', 'discarded')
               AND finalized_at < clock_timestamp() - ${SqlInterval.millis(sql, deadMillis)})
        LIMIT ${batch}
      ), gone AS (DELETE FROM jobs USING doomed WHERE jobs.id = doomed.id RETURNING 1)
      SELECT count(*)::int AS n FROM gone`
    removed += row!.n
    if (row!.n < batch) return removed
  }
})
