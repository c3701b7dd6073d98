/**
 * A log that went back in time under a running worker: after a failover to an asynchronous
 * standby that had not received the primary's last commits (or a restore under running workers),
 * the events this process read last are gone from the log. Their seqs are given again to other
 * events, and receivers may have had the first ones, so no round may fan out in that epoch any
 * more: the log needs what `bothy restore finalize` does.
 *
 * The floor is the highest head this process read: its seq, epoch and time (`event_seq.last_at`,
 * the head event's `occurred_at`). The log went back when, in the floor's epoch, the head is below
 * the floor's seq, or an event at or below the floor's seq is newer than the floor's time: within
 * an epoch seqs and times rise together, so that event was appended after the failover and took a
 * lost seq (new appends overtake the lost tail within a fraction of a second when a producer runs
 * at full speed). That second test needs the new primary's clock to be no further behind the old
 * one's than the failover took.
 *
 * What it keeps true: a consumer round (`ConsumerRound`, `StatementRound`, in the snapshot of its
 * read) never writes when the log went back below its process's floor. It fails with `LogRewound`
 * instead, and nothing of it commits; `recover` then runs (the worker's: finalize the rewind as a
 * restore, once across workers) and the floor starts again from the next head read.
 *
 *   floor: none ──see(head)──> head ──see(higher, or another epoch)──> that head
 *                                   ──see(head, rewound)──> LogRewound ──recover──> none
 *
 * Only what this process read counts: a worker that never read the lost tail does not detect its
 * loss (see docs/operations.md, "Failover"). Without the worker's layer (a host driving rounds
 * itself, the tests) the guard is off: it remembers nothing and finds nothing.
 */
import { Context, Effect, Layer, Schema } from "effect"
import type { SqlClient, Statement } from "effect/sql"
import type { SqlError } from "effect/sql/SqlError"

/** A head as a round reads it: seq, epoch, and its time as text (exact to the microsecond). */
export interface Floor {
  readonly seq: bigint
  readonly epoch: number
  readonly at: string
}

export class LogRewound extends Schema.TaggedError<LogRewound>()("LogRewound", {
  epoch: Schema.Number,
  /** The highest head this process had read in `epoch`. */
  seen: Schema.BigInt,
  /** The head the database has now (above `seen` when new appends took the lost seqs). */
  head: Schema.BigInt,
}) {
  override get message() {
    return `the event log went back: this worker read up to seq ${this.seen} in epoch ${this.epoch}, and the database no longer has that event (its head is seq ${this.head}: a failover to a standby that had not received the last commits, or a restore); the lost seqs are given again to other events, so it must be finalized as \`bothy restore finalize\` does`
  }
}

export interface Guard {
  /** The floor, if any: the highest head read. */
  readonly floor: () => Floor | undefined
  /**
   * A round read `head`; `rewound`: `rewoundSql` held in the same snapshot. Fails when it did,
   * else raises the floor to `head`.
   */
  readonly see: (head: Floor, rewound: boolean) => Effect.Effect<void, LogRewound>
  /**
   * What to do about a rewind a round found; the floor is forgotten once it succeeds. Failing with
   * the rewind itself leaves it for the next round to find and recover again.
   */
  readonly recover: (rewound: LogRewound) => Effect.Effect<void, SqlError | LogRewound>
}

/**
 * Whether the log went back below `floor` (see the header), as a boolean SQL expression over the
 * head's `seq` and `epoch` expressions and `events`, a relation of the events the round reads
 * (`seq`, `occurred_at`); false without a floor. Its text is the same with or without one (a
 * prepared statement's, and the SQL snapshots').
 */
export const rewoundSql = (
  sql: SqlClient.SqlClient,
  floor: Floor | undefined,
  head: { readonly seq: Statement.Fragment; readonly epoch: Statement.Fragment },
  events: Statement.Fragment,
) => {
  const seq = floor?.seq ?? null
  return sql`coalesce(${head.epoch} = ${floor?.epoch ?? null}::int AND (${head.seq} < ${seq}::bigint OR EXISTS (
          SELECT FROM ${events} AS newer WHERE newer.seq <= ${seq}::bigint AND newer.occurred_at > ${floor?.at ?? null}::timestamptz
        )), false)`
}

/**
 * For `rewoundSql`'s `events` outside a read of its own: the events after `after` newer than the
 * floor, up to the head's time `headAt`. Run it unprepared: planned with its bounds, it reads only
 * the leaves since the floor's time.
 */
export const newerThan = (sql: SqlClient.SqlClient, floor: Floor, after: bigint, headAt: string) =>
  sql`(SELECT seq, occurred_at FROM event_log
       WHERE seq > ${after} AND occurred_at > ${floor.at}::timestamptz AND occurred_at <= ${headAt}::timestamptz)`

const off: Guard = { floor: () => undefined, see: () => Effect.void, recover: () => Effect.void }

/** The guard rounds consult; off unless the worker provides `layer`. */
export const LogRewind = Context.Reference<Guard>("bothy/LogRewind", { defaultValue: () => off })

/** A live guard whose rewinds `recover` handles (the worker's: finalize, see `RestoreFinalize`). */
export const make = (recover: Guard["recover"]): Guard => {
  let floor: Floor | undefined
  return {
    floor: () => floor,
    see: (head, rewound) =>
      Effect.suspend(() => {
        if (rewound && floor !== undefined) {
          return Effect.fail(new LogRewound({ epoch: floor.epoch, seen: floor.seq, head: head.seq }))
        }
        if (floor === undefined || head.epoch !== floor.epoch || head.seq > floor.seq) floor = head
        return Effect.void
      }),
    // Forgotten only once recovered: a failed recovery leaves the next round to find it again.
    recover: (rewound) =>
      recover(rewound).pipe(
        Effect.tap(() =>
          Effect.sync(() => {
            floor = undefined
          }),
        ),
      ),
  }
}

export const layer = <R>(recover: (rewound: LogRewound) => Effect.Effect<void, SqlError | LogRewound, R>) =>
  Layer.effect(
    LogRewind,
    Effect.map(Effect.context<R>(), (context) => make((rewound) => Effect.provide(recover(rewound), context))),
  )
