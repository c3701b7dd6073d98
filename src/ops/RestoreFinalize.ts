/**
 * `bothy restore finalize`: what a database restored from a backup (or to a point in time) needs
 * before any worker or producer runs on it again, in one transaction:
 *
 *   workers   no live worker lease (`job_workers`, the `post_commit` sequencer's), no consumer round
 *             holding its cursor ── else: refused, nothing changed
 *   detaches  every pending `event_log` partition detach finalized (`EventLogDetach`)
 *   epoch     a new log epoch, never given before (`EventLogEpoch`), under the append lock
 *   cursors   every consumer cursor at the restored head (`ConsumerCursors`)
 *   webhooks  pending deliveries without a number move into the new epoch (`WebhookEpoch`)
 *
 * What it keeps true: no id a receiver saw before the restore comes again with other content. The
 * seqs after the restored head are numbered again for other events; they carry the new epoch, and
 * so do the webhook numbers handed out from now on. Deliveries and jobs pending at the restore point
 * are kept with their ids (a numbered delivery keeps its `webhook-id`, so a receiver that got it
 * already recognises it); events up to the head get no new work.
 *
 * It creates no job and no delivery, so running it twice in a row creates no duplicate work; the
 * second run starts one more epoch, which costs nothing (an epoch is only an id's prefix) and is
 * what a second restore needs anyway: it cannot tell "just finalized" from "restored again to a
 * point just after a finalize". Appends committed but not yet sequenced (`post_commit` mode) are
 * left where they are: the sequencer numbers them after the head, in the new epoch, so consumers
 * see them as new events.
 */
import { Effect, Schema } from "effect"
import { SqlClient } from "effect/sql"
import * as ConsumerCursors from "../consumer/ConsumerCursors.ts"
import * as JobLease from "../jobs/JobLease.ts"
import * as EventLogDetach from "../log/EventLogDetach.ts"
import * as EventLogEpoch from "../log/EventLogEpoch.ts"
import * as WebhookEpoch from "../webhooks/WebhookEpoch.ts"

export class WorkersStillRunning extends Schema.TaggedError<WorkersStillRunning>()("WorkersStillRunning", {
  workers: Schema.Array(Schema.String),
  leaseUntil: Schema.Date,
}) {
  override get message() {
    return `workers hold live leases (${this.workers.join(", ")}, until ${this.leaseUntil.toISOString()}): stop every bothy worker before finalizing a restore, then run it again (a stopped worker's lease lapses by then)`
  }
}

export interface Finalized {
  readonly head: bigint
  readonly previousEpoch: number
  readonly epoch: number
  readonly cursors: ReadonlyArray<ConsumerCursors.CursorMove>
  readonly detached: ReadonlyArray<string>
  readonly deliveries: WebhookEpoch.PendingCarried
  readonly unsequenced: number
}

const refuseLiveWorkers = Effect.gen(function* () {
  const sequencer = yield* EventLogEpoch.liveSequencer()
  const live = [
    ...(yield* JobLease.live()),
    ...(sequencer === undefined ? [] : [{ id: `sequencer ${sequencer.holder}`, expiresAt: sequencer.expiresAt }]),
  ]
  if (live.length === 0) return
  const until = new Date(Math.max(...live.map((w) => w.expiresAt.getTime())))
  return yield* new WorkersStillRunning({ workers: live.map((w) => w.id), leaseUntil: until })
})

/** Finalizes a restored database (see the module header). */
export const finalize = Effect.fn("RestoreFinalize.finalize")(function* () {
  const sql = yield* SqlClient.SqlClient
  return yield* sql.withTransaction(
    Effect.gen(function* () {
      yield* refuseLiveWorkers
      const detached = yield* EventLogDetach.finalizePending()
      const { head, previous, epoch } = yield* EventLogEpoch.start()
      const cursors = yield* ConsumerCursors.moveAllTo(head)
      const deliveries = yield* WebhookEpoch.carryIntoEpoch(epoch)
      const unsequenced = yield* EventLogEpoch.unsequencedAppends()
      return { head, previousEpoch: previous, epoch, cursors, detached, deliveries, unsequenced } satisfies Finalized
    }),
  )
})

/** What `finalize` changed, one line each, as `bothy restore finalize` prints it. */
export const lines = (f: Finalized): ReadonlyArray<string> => [
  `epoch ${f.previousEpoch} -> ${f.epoch} (head seq ${f.head}: the seqs after it are numbered in epoch ${f.epoch})`,
  ...f.cursors.map((c) =>
    c.from === c.to ? `cursor ${c.name}: at ${c.to} already` : `cursor ${c.name}: ${c.from} -> ${c.to}`,
  ),
  ...f.detached.map((name) => `detach finalized: ${name} (now a table of its own, with its rows; not dropped)`),
  `webhook deliveries pending: ${f.deliveries.numbered} keep their number and webhook-id, ${f.deliveries.carried} not numbered yet moved to epoch ${f.epoch}`,
  ...(f.unsequenced > 0
    ? [`appends waiting for the sequencer: ${f.unsequenced} (numbered after seq ${f.head}, in epoch ${f.epoch})`]
    : []),
]
