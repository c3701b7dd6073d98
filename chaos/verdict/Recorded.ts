/**
 * What the database holds once a chaos run has drained and its workers stopped: the log and its
 * head, the two consumers' cursors, the subscriptions' states, every webhook delivery row, every
 * push job, the push registrations still kept, and the jobs left running. Read once, as it is: the
 * verdict's judges take their facts from here and from the harness's own records, never from
 * bothy's counters.
 */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"
import * as PushJobAudit from "../PushJobAudit.ts"

export interface LoggedEvent {
  readonly seq: bigint
  readonly epoch: number
  readonly space: string
  readonly type: string
  readonly actor: string
  /** The producer's key (`payload.key`); null for the old events the harness dated back. */
  readonly key: string | null
}

export interface DeliveryRow {
  readonly sub: string
  readonly seq: bigint
  readonly state: string
  readonly reason: string | null
  readonly finished: Date | null
  readonly sequence: bigint | null
}

export interface PushJob {
  readonly registration: string
  readonly seq: string
  readonly state: string
  readonly finalized: Date | null
  readonly errors: unknown
}

export interface Recorded {
  readonly events: ReadonlyArray<LoggedEvent>
  readonly head: bigint
  readonly cursors: ReadonlyArray<{ readonly name: string; readonly lastSeq: bigint }>
  readonly subscriptions: ReadonlyArray<{ readonly id: string; readonly state: string; readonly cause: string | null }>
  readonly deliveries: ReadonlyArray<DeliveryRow>
  readonly jobs: ReadonlyArray<PushJob>
  /** Delivery rows by how they ended. */
  readonly endings: ReadonlyArray<{ readonly state: string; readonly reason: string | null; readonly n: number }>
  /** Ids of the push registrations still kept. */
  readonly registered: ReadonlySet<string>
  /** Jobs of any kind still `running`. */
  readonly jobsRunning: number
}

export const load = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const events = yield* sql<LoggedEvent>`
    SELECT seq, epoch, space_id AS space, type, actor, payload ->> 'key' AS key FROM event_log ORDER BY seq`
  const [top] = yield* sql<{ head: bigint }>`SELECT value AS head FROM event_seq`
  const cursors = yield* sql<{ name: string; lastSeq: bigint }>`
    SELECT name, last_seq AS "lastSeq" FROM event_consumer_cursors WHERE name IN ('webhooks', 'push')`
  const subscriptions = yield* sql<{ id: string; state: string; cause: string | null }>`
    SELECT id::text, state, disabled_cause AS cause FROM webhook_subscriptions`
  const deliveries = yield* sql<DeliveryRow>`
    SELECT subscription_id::text AS sub, event_seq AS seq, state, dead_reason AS reason, finished_at AS finished,
           sequence
    FROM webhook_deliveries`
  const jobs: ReadonlyArray<PushJob> = yield* PushJobAudit.read
  const endings = yield* sql<{ state: string; reason: string | null; n: number }>`
    SELECT state, dead_reason AS reason, count(*)::int AS n FROM webhook_deliveries GROUP BY 1, 2 ORDER BY 1, 2`
  const registered = yield* sql<{ id: string }>`SELECT id::text FROM push_registrations`
  const [running] = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM jobs WHERE state = 'running'`
  return {
    events,
    head: top!.head,
    cursors,
    subscriptions,
    deliveries,
    jobs,
    endings,
    registered: new Set(registered.map((r) => r.id)),
    jobsRunning: running!.n,
  } satisfies Recorded
})
