/**
 * Which log epoch a delivery's `webhook-id` (`msg_<epoch>_<subscription>_<sequence>`) and envelope
 * carry: `webhook_deliveries.epoch`. The round gives a delivery its event's epoch, which is the
 * current one. What has to hold across a restore is that no (epoch, sequence) pair a receiver saw
 * ever comes again with other content.
 *
 * After a restore the subscription's counter (`last_sequence`) is the backup's, behind what the
 * receiver saw: in the lost history the drainer went on numbering, in the old epoch, deliveries that
 * the restored database may number differently (a right revoked or granted since the backup makes
 * the same numbers land on other events). So no number may be handed out in an old epoch after a
 * restore. The rule: a delivery that has no number yet carries the current epoch.
 * - `carryIntoEpoch` (restore finalize) moves the pending deliveries that have no number into the
 *   new epoch: they never went out in this history, so nothing is lost by it. Those that have a
 *   number keep it and their epoch: their request may have gone out, and the receiver that got it
 *   recognises the same `webhook-id` when it comes again.
 * - `currentEpoch` is the epoch for deliveries created or revived later for older events
 *   (re-enabling a subscription from a seq).
 * The counter itself goes on from the backup's value: every pair the new epoch makes is new,
 * whatever it counts from, and the unique index on numbers stays as it is.
 *
 * The edge this leaves: a delivery numbered at the backup but not yet sent, whose number the lost
 * history gave back and then handed to another delivery (the first was suppressed meanwhile), goes
 * out under a number the receiver saw on that other one.
 */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"
import * as EventLog from "../log/EventLog.ts"

/** The current log epoch, as an SQL expression. */
export const currentEpoch = EventLog.headEpoch

export interface PendingCarried {
  /** Pending deliveries that keep their number and `webhook-id`. */
  readonly numbered: number
  /** Pending deliveries without a number, now in `epoch`. */
  readonly carried: number
}

/** Moves the pending deliveries that have no number into `epoch` (see the header). */
export const carryIntoEpoch = Effect.fn("WebhookEpoch.carryIntoEpoch")(function* (epoch: number) {
  const sql = yield* SqlClient.SqlClient
  const [row] = yield* sql<PendingCarried>`
    WITH carried AS (
      UPDATE webhook_deliveries SET epoch = ${epoch}
      WHERE state = 'pending' AND sequence IS NULL AND epoch <> ${epoch}
      RETURNING id
    )
    SELECT (SELECT count(*) FROM webhook_deliveries WHERE state = 'pending' AND sequence IS NOT NULL)::int AS numbered,
           (SELECT count(*) FROM carried)::int AS carried`
  return row ?? { numbered: 0, carried: 0 }
})
