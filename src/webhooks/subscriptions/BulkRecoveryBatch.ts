/**
 * One batch of a bulk recovery, in one transaction: lock the recovery's row, read up to
 * `batch_size` deliveries after its cursor that the filter selects (in (subscription, seq) order),
 * send them again (or, for a replay, copy them to the new subscription), and move the cursor past
 * them.
 *
 * What it keeps true: the deliveries a batch dealt with and the cursor past them commit together
 * or not at all, and a batch starts from the cursor as committed, under the row's lock. So a run
 * killed at any point (SIGKILL included) leaves either the whole batch or nothing, the next run
 * starts where the last commit left, and two runs of one recovery (a rescued job beside a run
 * whose lease lapsed) take turns on the row instead of both sending a delivery. A run whose job
 * was claimed again since (`Jobs.attemptedAfter`) writes nothing and stops.
 *
 *   locked ──paused/done──▶ (stop)
 *     │
 *   read candidates ─▶ per subscription: resend (DeliveryResend.revive) | seed (replay)
 *     │
 *   advance cursor ──fewer than a batch──▶ done (a replay enables the new subscription)
 *
 * Resending goes through `DeliveryResend.revive` under `lockSubscription`, as one delivery's
 * re-send does: the delivery keeps its id, `sequence` and so its `webhook-id`, and the
 * subscription's one drainer sends it in seq order. A subscription that is disabled (or gone) is
 * skipped, its deliveries counted in `skipped`, as are deliveries whose event left the log.
 */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"
import * as Jobs from "../../jobs/Jobs.ts"
import { eventAt, headSeq, holdsEvent } from "../../log/EventLog.ts"
import { currentEpoch } from "../WebhookEpoch.ts"
import { lockCursor, lockSubscriptionAfter, revive } from "./DeliveryResend.ts"
import { type StoredFilter, statesSql, whereSql } from "./RecoveryFilter.ts"
import { ensureDrainer, resume } from "./SubscriptionResume.ts"

export interface RecoveryRow {
  readonly id: bigint
  readonly state: "running" | "paused" | "done"
  readonly filter: StoredFilter
  readonly batchSize: number
  readonly replayTo: string | null
  readonly replayFrom: bigint | null
  readonly cursorSubscription: string | null
  readonly cursorSeq: bigint | null
}

/** What a batch did: the subscriptions it revived deliveries of (for `runWaitingDrainer`), and whether more may follow. */
export type BatchOutcome =
  | { readonly _tag: "Progressed"; readonly touched: ReadonlyArray<string>; readonly done: boolean }
  | { readonly _tag: "Stopped"; readonly why: "paused" | "done" | "stale" | "missing" }

interface Candidate {
  readonly sub: string
  readonly seq: bigint
  readonly id: bigint
}

const lockRow = (sql: SqlClient.SqlClient, job: bigint) =>
  sql<RecoveryRow>`
    SELECT id, state, filter, batch_size AS "batchSize", replay_to::text AS "replayTo", replay_from AS "replayFrom",
           cursor_subscription::text AS "cursorSubscription", cursor_seq AS "cursorSeq"
    FROM webhook_recoveries WHERE job_id = ${job} FOR UPDATE`.pipe(Effect.map(([row]) => row))

/** The query of the deliveries a recovery selects; `after`, the cursor, when there is one. */
export const selected = (sql: SqlClient.SqlClient, filter: StoredFilter, after: RecoveryRow | undefined) => {
  const cursor =
    after?.cursorSubscription == null || after.cursorSeq === null
      ? sql`true`
      : sql`(d.subscription_id, d.event_seq) > (${after.cursorSubscription}::uuid, ${after.cursorSeq})`
  const event =
    filter.eventTypes.length === 0 ? sql.literal("") : sql`JOIN ${eventAt(sql, sql`d.event_seq`, sql`d.event_at`)}`
  return sql`
    FROM webhook_deliveries AS d JOIN webhook_subscriptions AS s ON s.id = d.subscription_id ${event}
    WHERE ${cursor} AND ${whereSql(sql, filter)}`
}

/** A batch's deliveries: the next `batch_size` after the cursor, in (subscription, seq) order. */
export const candidates = (sql: SqlClient.SqlClient, row: RecoveryRow) =>
  sql<Candidate>`
    SELECT d.subscription_id::text AS sub, d.event_seq AS seq, d.id ${selected(sql, row.filter, row)}
    ORDER BY d.subscription_id, d.event_seq LIMIT ${row.batchSize}`

/** `rows` grouped by subscription, in their order. */
const bySubscription = (rows: ReadonlyArray<Candidate>) => {
  const groups = new Map<string, Array<bigint>>()
  for (const r of rows) groups.set(r.sub, [...(groups.get(r.sub) ?? []), r.id])
  return [...groups]
}

/**
 * Sends the deliveries `ids` of `sub` again; how many went pending (the rest are skipped). After
 * `lockCursor`, whose `last_seq` is `cursor`.
 */
const resendGroup = (
  sql: SqlClient.SqlClient,
  filter: StoredFilter,
  cursor: bigint | undefined,
  sub: string,
  ids: ReadonlyArray<bigint>,
) =>
  Effect.gen(function* () {
    const subscription = yield* lockSubscriptionAfter(sql, sub, cursor)
    if (subscription === undefined || subscription.state !== "active") return 0
    // Still in a selected state (a drainer may have changed it since the read), and never pending twice.
    const picked = sql`
      SELECT d.id FROM webhook_deliveries AS d
      WHERE d.id = ANY(${ids}::bigint[]) AND d.state <> 'pending' AND ${statesSql(sql, filter)}
        AND ${holdsEvent(sql, sql`d.event_seq`, sql`d.event_at`)}
      ORDER BY d.id FOR UPDATE OF d`
    return yield* revive(sql, sub, subscription, picked)
  })

/**
 * Copies the deliveries `ids` to the replay's subscription `to` as pending deliveries of the same
 * events (numbered by `to` when they go out); it is disabled while seeded, so none goes out yet.
 */
const seedGroup = (sql: SqlClient.SqlClient, to: string, ids: ReadonlyArray<bigint>) =>
  sql<{ n: number }>`
    WITH seeded AS (
      INSERT INTO webhook_deliveries (subscription_id, event_seq, epoch, event_at)
      SELECT ${to}::uuid, d.event_seq, ${currentEpoch(sql)}, d.event_at
      FROM webhook_deliveries AS d
      WHERE d.id = ANY(${ids}::bigint[]) AND ${holdsEvent(sql, sql`d.event_seq`, sql`d.event_at`)}
      ORDER BY d.event_seq
      ON CONFLICT (subscription_id, event_seq) DO NOTHING
      RETURNING 1
    )
    SELECT count(*)::int AS n FROM seeded`.pipe(Effect.map(([r]) => r?.n ?? 0))

/**
 * The seeded subscription goes live: enabled from the seq after the head at its creation (so it
 * gets what came since, too), its start moved back before the first seeded delivery (which the
 * drainer needs to send it), and a drainer for it.
 */
const activateReplay = (sql: SqlClient.SqlClient, to: string, from: bigint) =>
  Effect.gen(function* () {
    const [h] = yield* sql<{ head: bigint }>`SELECT ${headSeq(sql)} AS head`
    yield* resume(to, h!.head > from ? from + 1n : undefined)
    yield* sql`
      UPDATE webhook_subscriptions AS s
      SET started_seq = least(s.started_seq,
        coalesce((SELECT min(d.event_seq) - 1 FROM webhook_deliveries AS d WHERE d.subscription_id = s.id), s.started_seq))
      WHERE s.id = ${to}::uuid`
    yield* ensureDrainer(sql, to)
  })

const advance = (
  sql: SqlClient.SqlClient,
  row: RecoveryRow,
  last: Candidate | undefined,
  counts: { readonly examined: number; readonly resent: number },
  done: boolean,
) => sql`
  UPDATE webhook_recoveries
  SET cursor_subscription = ${last?.sub ?? row.cursorSubscription}::uuid, cursor_seq = ${last?.seq ?? row.cursorSeq},
      examined = examined + ${counts.examined}, resent = resent + ${counts.resent},
      skipped = skipped + ${counts.examined - counts.resent},
      state = ${done ? "done" : row.state}, updated_at = clock_timestamp(),
      finished_at = ${done ? sql`clock_timestamp()` : sql`NULL`}
  WHERE id = ${row.id}`

/** One batch of the recovery run by attempt `attempt` of job `job` (see the header). */
export const runBatch = (job: bigint, attempt: number) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    return yield* sql.withTransaction(
      Effect.gen(function* () {
        const row = yield* lockRow(sql, job)
        if (row === undefined) return { _tag: "Stopped", why: "missing" } satisfies BatchOutcome as BatchOutcome
        if (row.state !== "running") return { _tag: "Stopped", why: row.state } satisfies BatchOutcome as BatchOutcome
        const [stale] = yield* sql<{
          stale: boolean
        }>`SELECT ${Jobs.attemptedAfter(sql, sql`${job}`, attempt)} AS stale`
        if (stale!.stale) return { _tag: "Stopped", why: "stale" } satisfies BatchOutcome as BatchOutcome
        const found = yield* candidates(sql, row)
        // Once for the batch: every re-send falls between two rounds, as one re-send does.
        const cursor = row.replayTo === null && found.length > 0 ? yield* lockCursor : undefined
        let resent = 0
        const touched: Array<string> = []
        for (const [sub, ids] of bySubscription(found)) {
          const n =
            row.replayTo === null
              ? yield* resendGroup(sql, row.filter, cursor, sub, ids)
              : yield* seedGroup(sql, row.replayTo, ids)
          resent += n
          if (n > 0 && row.replayTo === null) touched.push(sub)
        }
        const done = found.length < row.batchSize
        if (done && row.replayTo !== null && row.replayFrom !== null) {
          yield* activateReplay(sql, row.replayTo, row.replayFrom)
        }
        yield* advance(sql, row, found.at(-1), { examined: found.length, resent }, done)
        return { _tag: "Progressed", touched, done } satisfies BatchOutcome as BatchOutcome
      }),
    )
  })
