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
 * point just after a finalize". A worker runs the same steps itself when its round finds the log
 * gone back under it (`afterRewind`: a failover to a standby that lacked the last commits). Appends committed but not yet sequenced (`post_commit` mode) are
 * left where they are: the sequencer numbers them after the head, in the new epoch, so consumers
 * see them as new events.
 */
import { Effect, Schedule, Schema } from "effect"
import { SqlClient } from "effect/sql"
import * as ConsumerCursors from "../consumer/ConsumerCursors.ts"
import * as JobLease from "../jobs/JobLease.ts"
import * as EventLogDetach from "../log/EventLogDetach.ts"
import * as EventLogEpoch from "../log/EventLogEpoch.ts"
import type { LogRewound } from "../log/LogRewind.ts"
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

/** Detaches, epoch, cursors and webhooks, in the caller's transaction (see the module header). */
const steps = Effect.gen(function* () {
  const detached = yield* EventLogDetach.finalizePending()
  const { head, previous, epoch } = yield* EventLogEpoch.start()
  const cursors = yield* ConsumerCursors.moveAllTo(head)
  const deliveries = yield* WebhookEpoch.carryIntoEpoch(epoch)
  const unsequenced = yield* EventLogEpoch.unsequencedAppends()
  return { head, previousEpoch: previous, epoch, cursors, detached, deliveries, unsequenced } satisfies Finalized
})

/** Finalizes a restored database (see the module header). */
export const finalize = Effect.fn("RestoreFinalize.finalize")(function* () {
  const sql = yield* SqlClient.SqlClient
  return yield* sql.withTransaction(Effect.andThen(refuseLiveWorkers, steps))
})

/**
 * The same finalize, run by a worker whose round found the log gone back under it (`LogRewind`: a
 * failover to a standby that lacked the last commits). Running workers do not stop it: the rounds
 * of every worker refuse to write below what they read, and this is what they wait for. Once across
 * workers: under the append lock, it finalizes only while the log is still in the epoch the worker
 * read; a worker that comes second finds the new epoch and changes nothing (`undefined`).
 */
export const afterRewind = Effect.fn("RestoreFinalize.afterRewind")(function* (rewound: LogRewound) {
  const sql = yield* SqlClient.SqlClient
  return yield* sql.withTransaction(
    Effect.gen(function* () {
      if ((yield* EventLogEpoch.currentLocked()) !== rewound.epoch) return undefined
      return yield* steps
    }),
  )
})

/**
 * `afterRewind` as the worker's `LogRewind` recovery: finalized, with what changed logged. A round
 * of another consumer or worker holding its cursor for a moment is waited out (every 100 ms, up to
 * 5 s); one that holds it longer leaves the rewind for the next round to recover.
 */
export const recoverRewind = (rewound: LogRewound) =>
  afterRewind(rewound).pipe(
    Effect.retry({
      while: (e) => e._tag === "ConsumerRoundRunning",
      schedule: Schedule.spaced("100 millis"),
      times: 50,
    }),
    Effect.catchTag("ConsumerRoundRunning", () => Effect.fail(rewound)),
    Effect.flatMap((finalized) =>
      finalized === undefined
        ? Effect.logInfo("the log's rewind was finalized already (by another worker); going on in its new epoch")
        : Effect.logWarning(`finalized the log's rewind as a restore: ${lines(finalized).join("; ")}`),
    ),
  )

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
