/**
 * A subscription's health: `degraded` when more of its attempts failed over the window than the
 * threshold allows (default: above 50 % over 15 minutes, with at least 10 attempts), recovered
 * when the rate falls below it again. Degraded is a flag beside `active` (`degraded_at`), not a
 * state: a degraded subscription still delivers, in order, as before; only a disable stops it.
 *
 * What it keeps true:
 * - the counts cost the drainer nothing extra: the statement that puts attempts on record adds
 *   them to the row it updates anyway (`countedSql`), in two buckets of the window's length (the
 *   current one and the one before), so the rate over the last window is the current bucket plus
 *   the part of the one before that the window still covers (the estimate of a sliding window,
 *   with memory that does not grow with the traffic);
 * - a change of health is judged (`judge`) only where it can happen: after a failed request, and
 *   after successes of a subscription that is degraded; healthy successes judge nothing;
 * - the flag and its `bothy.subscription.degraded` / `.recovered` event commit in one transaction
 *   (the append last), so one exists exactly when the other changed;
 * - time is the drainer's `Clock` (the answers' times), never the database's, so `TestClock` drives it.
 *
 *   healthy ──(attempts ≥ minimum and failures > threshold × attempts)──> degraded
 *   degraded ──(failures < threshold × attempts)──> healthy
 *   either ──(disable)──> counts and flag cleared
 */
import { Duration, Effect, Metric } from "effect"
import { SqlClient, type Statement } from "effect/sql"
import * as WebhookMetrics from "../WebhookMetrics.ts"
import * as OperationalEvents from "./OperationalEvents.ts"

export interface HealthSettings {
  /** Failed attempts over attempts above which a subscription is degraded, in (0, 1). */
  readonly failureRate: number
  readonly window: Duration.Duration
  /** Fewer attempts in the window never degrade. */
  readonly minAttempts: number
}

export const healthDefaults: HealthSettings = {
  failureRate: 0.5,
  window: Duration.minutes(15),
  minAttempts: 10,
}

/** What a record statement adds: its attempts, how many failed, and when the last was answered (Clock). */
export interface Counted {
  readonly attempts: number
  readonly failures: number
  readonly at: number
}

/** The counts of a batch of answers. */
export const countOf = (sent: ReadonlyArray<{ readonly ok: boolean; readonly answered: number }>): Counted => ({
  attempts: sent.length,
  failures: sent.filter((s) => !s.ok).length,
  at: sent.reduce((at, s) => Math.max(at, s.answered), 0),
})

/** The SET list that clears health (a disable, an enabling). */
export const cleared =
  "degraded_at = NULL, health_since = NULL, health_sent = 0, health_failed = 0, health_prev_sent = 0, health_prev_failed = 0"

/**
 * A record statement's batch as a FROM item `hb(at, span, sent, failed)`, so its values are
 * parameters once however often `countedSql` reads them.
 */
export const batchSql = (sql: SqlClient.SqlClient, settings: HealthSettings, counted: Counted) => sql`
  (SELECT ${new Date(counted.at)}::timestamptz AS at, ${Duration.toMillis(settings.window)} * interval '1 millisecond' AS span,
          ${counted.attempts}::int AS sent, ${counted.failures}::int AS failed) AS hb`

/**
 * The SET list of a record statement that adds the batch `hb` (`batchSql`, in its FROM) to the
 * row `s` when `when` holds (the record's `progress.recorded`): a bucket older than the window
 * becomes the one before, one older than two windows is forgotten.
 */
export const countedSql = (sql: SqlClient.SqlClient, when: Statement.Fragment) => {
  const fresh = sql`(s.health_since IS NULL OR hb.at >= s.health_since + 2 * hb.span)`
  const rolled = sql`(hb.at >= s.health_since + hb.span)`
  const count = (current: string, previous: string, batch: string) => sql`
    ${sql.literal(previous)} = CASE WHEN NOT ${when} THEN s.${sql.literal(previous)} WHEN ${fresh} THEN 0
      WHEN ${rolled} THEN s.${sql.literal(current)} ELSE s.${sql.literal(previous)} END,
    ${sql.literal(current)} = CASE WHEN NOT ${when} THEN s.${sql.literal(current)} WHEN ${fresh} OR ${rolled} THEN hb.${sql.literal(batch)}
      ELSE s.${sql.literal(current)} + hb.${sql.literal(batch)} END`
  return sql`${count("health_sent", "health_prev_sent", "sent")},
    ${count("health_failed", "health_prev_failed", "failed")},
    health_since = CASE WHEN NOT ${when} THEN s.health_since WHEN ${fresh} THEN hb.at
      WHEN ${rolled} THEN s.health_since + hb.span ELSE s.health_since END`
}

/**
 * `attempts` and `failures` of the row `s` over the window ending at `at`: the current bucket,
 * and the share of the one before that the window still covers.
 */
const estimateSql = (sql: SqlClient.SqlClient, settings: HealthSettings, at: number) => {
  const w = Duration.toMillis(settings.window)
  const elapsed = sql`greatest(0, coalesce(extract(epoch FROM ${new Date(at)}::timestamptz - s.health_since) * 1000, ${2 * w}))`
  const over = (current: string, previous: string) => sql`
      CASE WHEN ${elapsed} >= ${2 * w} THEN 0
           WHEN ${elapsed} >= ${w} THEN s.${sql.literal(current)} * (1 - (${elapsed} - ${w}) / ${w})
           ELSE s.${sql.literal(previous)} * (1 - ${elapsed} / ${w}) + s.${sql.literal(current)} END::float8`
  return sql`${over("health_sent", "health_prev_sent")} AS attempts, ${over("health_failed", "health_prev_failed")} AS failures`
}

export type Change = "degraded" | "recovered"

const changes = (change: Change) => Metric.update(Metric.withAttributes(WebhookMetrics.healthChanges, { change }), 1)

/**
 * Judges the subscription's health at `at` (the drainer's clock): flips `degraded_at` when the
 * rate crossed the threshold, and appends the event of the change in the same transaction. What
 * changed, or undefined.
 */
export const judge = Effect.fn("SubscriptionHealth.judge")(function* (
  settings: HealthSettings,
  subscriptionId: string,
  at: number,
  lastStatus: number | null,
) {
  const sql = yield* SqlClient.SqlClient
  const changed = yield* sql.withTransaction(
    Effect.gen(function* () {
      const [row] = yield* sql<{ owner: string; degraded: boolean; attempts: number; failures: number }>`
        UPDATE webhook_subscriptions AS t
        SET degraded_at = CASE WHEN t.degraded_at IS NULL THEN ${new Date(at)}::timestamptz END
        FROM (
          SELECT s.id, ${estimateSql(sql, settings, at)} FROM webhook_subscriptions AS s
          WHERE s.id = ${subscriptionId}::uuid AND s.state = 'active'
        ) AS h
        WHERE t.id = h.id AND CASE WHEN t.degraded_at IS NULL
          THEN h.attempts >= ${settings.minAttempts} AND h.failures > ${settings.failureRate} * h.attempts
          ELSE h.failures < ${settings.failureRate} * h.attempts END
        RETURNING t.owner, t.degraded_at IS NOT NULL AS degraded, h.attempts, h.failures`
      if (row === undefined) return undefined
      const change: Change = row.degraded ? "degraded" : "recovered"
      yield* OperationalEvents.append([
        OperationalEvents.healthEvent(
          row.degraded ? OperationalEvents.subscriptionDegraded : OperationalEvents.subscriptionRecovered,
          {
            subscription: subscriptionId,
            owner: row.owner,
            failureRate: row.attempts > 0 ? Math.round((row.failures / row.attempts) * 1000) / 1000 : 0,
            attempts: Math.round(row.attempts * 100) / 100,
            failures: Math.round(row.failures * 100) / 100,
            windowSeconds: Math.round(Duration.toSeconds(settings.window)),
            threshold: settings.failureRate,
            lastStatus,
          },
        ),
      ])
      return change
    }),
  )
  if (changed !== undefined) {
    yield* changes(changed)
    yield* Effect.logWarning(`webhooks: subscription ${subscriptionId} ${changed}`)
  }
  return changed
})
