/**
 * How a webhook delivery takes its `sequence`: when it is about to be sent for the first time, from
 * the subscription's counter (`webhook_subscriptions.last_sequence`), persisted before the request
 * and kept on every retry and re-send. A delivery that never goes out (suppressed, its space left
 * the scope, its subscription disabled) takes none, so what a receiver sees is 1, 2, 3, ... and a
 * gap means a delivery that was lost.
 *
 * What it keeps true:
 * - A number that may have gone out is never handed to another delivery: the webhook-id is built
 *   from it, and a receiver drops a second message with the same id as a duplicate.
 * - Numbers follow seq order: the drainer numbers the deliveries it is about to send, lowest first,
 *   and sends them in that order. It numbers none behind a delivery whose right was denied: that
 *   one is suppressed, or checked again and then numbered, before anything behind it, so a run
 *   that stops in between leaves no number (kept, as it may have gone out) above a lower seq.
 *
 * The drainer numbers its deliveries in the statement that reads them (hosts whose `Permissions`
 * answers in SQL), or in one statement right after `allowedEach` (`number`). A delivery that already
 * has a number keeps it: a retry, or a re-send after a run that stopped before its record.
 *
 * Giving numbers back. A drainer that will not send the deliveries it numbered (a delivery's check got too
 * old and is done again, a request failed and the queue behind it waits for the retry, the run
 * ends) gives their numbers back (`giveBack`): nothing after them was sent, so the counter moves
 * back and the next read numbers whatever then goes out. That is only safe while nobody else can
 * have read those numbers, which `numbered_by` decides: every statement that hands out or keeps
 * numbers for deliveries it will send, and every give-back, sets it to a fresh token, and only
 * - if it is still what that statement's snapshot saw (otherwise the statement numbers nothing and
 *   its deliveries come back without a number; the drainer reads again), and
 * - a give-back only if it is still the token of the run's last numbering, and only for numbers
 *   that very statement handed out, so no other statement handed out or kept any of them since.
 * Both take the subscription row's lock before they touch a delivery, so they are serialized: a
 * run that read a number (and may send it) has changed the token before any give-back of it can
 * pass, and a give-back that passed first makes every statement that saw the old numbers number
 * nothing. Two runs draining one subscription at once (a worker that lost its lease but still
 * runs, say) may both send, as before, but never two deliveries under one number.
 *
 * The edge this leaves: a delivery numbered by an earlier run that stopped without giving it back (a
 * crash, a lost connection) keeps its number even if it is suppressed when read again, since that
 * earlier request may have gone out; the receiver then sees a gap.
 *
 * These are fragments of the drainer's statements (see PendingDeliveries.ts), each statement's one
 * UPDATE of the subscription row (a CTE `subscription`, the row's alias `s` within it) included,
 * with a CTE `progress` that provides `numbering` (the statement returns deliveries to send),
 * `fresh` (how many of them need a new number) and `token_seen` (`numbered_by` as its snapshot
 * saw it), and a CTE `fresh (delivery_id, rank)` of the deliveries to number, rank 1 first.
 */
import { randomUUID } from "node:crypto"
import { Effect } from "effect"
import { SqlClient } from "effect/sql"
import { column } from "../../platform/SqlArrays.ts"

/** A token no other statement uses: what `numbered_by` becomes when a statement's numbers hold. */
export const newToken = (): string => randomUUID()

/** The subscription row has not been renumbered since the statement's snapshot. */
const unchanged = (sql: SqlClient.SqlClient) =>
  sql`progress.numbering AND s.numbered_by IS NOT DISTINCT FROM progress.token_seen`

/** SET clauses of the statement's UPDATE of the subscription row `s`: the counter and the token. */
export const bump = (sql: SqlClient.SqlClient, token: string | null) => sql`
  last_sequence = s.last_sequence + CASE WHEN ${unchanged(sql)} THEN progress.fresh ELSE 0 END,
  numbered_by = CASE WHEN ${unchanged(sql)} THEN ${token}::uuid ELSE s.numbered_by END`

/** RETURNING column of that UPDATE: whether the statement's numbers hold. */
export const numbersHold = (sql: SqlClient.SqlClient, token: string | null) =>
  sql`coalesce(s.numbered_by = ${token}::uuid, false) AS numbered`

/**
 * `numbered AS (...)`: the deliveries of `fresh` numbered on from the counter as `subscription`
 * left it (RETURNING `last_sequence` after the bump). Runs only if the numbers hold, and after
 * `subscription`, whose row lock it thereby waits for.
 */
export const numbered = (sql: SqlClient.SqlClient) => sql`
  numbered AS (
    UPDATE webhook_deliveries AS d SET sequence = subscription.last_sequence - progress.fresh + fresh.rank
    FROM fresh, subscription, progress WHERE d.id = fresh.delivery_id AND subscription.numbered
    RETURNING d.id, d.sequence
  )`

export interface Numbered {
  readonly deliveryId: bigint
  /** The number it goes out with; null when the numbers did not hold (read again). */
  readonly sequence: bigint | null
  /** This statement gave it its number (so this run may give it back). */
  readonly numberedHere: boolean
}

/** `number`'s one statement (its composed text is in docs/sql/webhook-numbering.sql). */
export const numberStatement = (
  sql: SqlClient.SqlClient,
  subscriptionId: string,
  deliveries: ReadonlyArray<{ readonly deliveryId: bigint; readonly existing: bigint | null }>,
  tokenSeen: string | null,
  token: string,
) => sql<Numbered>`
      WITH deliveries AS (
        SELECT * FROM unnest(${deliveries.map((d) => d.deliveryId.toString())}::bigint[],
                             ${column(deliveries, (d) => d.existing?.toString())}::bigint[])
          WITH ORDINALITY AS g(delivery_id, existing, ord)
      ), progress AS (
        SELECT true AS numbering, count(*) FILTER (WHERE existing IS NULL)::int AS fresh,
               ${tokenSeen}::uuid AS token_seen
        FROM deliveries
      ), subscription AS (
        UPDATE webhook_subscriptions AS s SET ${bump(sql, token)}
        FROM progress WHERE s.id = ${subscriptionId}::uuid
        RETURNING s.last_sequence, ${numbersHold(sql, token)}
      ), fresh AS (
        SELECT delivery_id, row_number() OVER (ORDER BY ord) AS rank FROM deliveries WHERE existing IS NULL
      ), ${numbered(sql)}
      SELECT g.delivery_id AS "deliveryId",
             CASE WHEN coalesce((SELECT subscription.numbered FROM subscription), false)
                  THEN coalesce(numbered.sequence, g.existing) END AS sequence,
             numbered.id IS NOT NULL AS "numberedHere"
      FROM deliveries AS g LEFT JOIN numbered ON numbered.id = g.delivery_id ORDER BY g.ord`

/**
 * Numbers `deliveries` (to be sent, in seq order; `existing` the number each already has) in one
 * statement (`numberStatement`), for hosts whose rights are asked outside the statement that read
 * them. `tokenSeen`: `numbered_by` as that statement saw it.
 */
export const number = (
  subscriptionId: string,
  deliveries: ReadonlyArray<{ readonly deliveryId: bigint; readonly existing: bigint | null }>,
  tokenSeen: string | null,
  token: string,
) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) => numberStatement(sql, subscriptionId, deliveries, tokenSeen, token)).pipe(
    Effect.withSpan("WebhookNumbering.number", { attributes: { "webhook.deliveries": deliveries.length } }),
  )

/**
 * Gives back `numbers`, which the statement that set `token` handed to deliveries the run has not sent
 * (and will read again before they go): if the subscription's token is still `token` and its
 * counter still ends at the highest of them, the counter moves back below the lowest and the
 * deliveries lose their numbers. Otherwise nothing changes and they keep them. Returns the token
 * the run holds afterwards (none when the give-back did not pass).
 */
export const giveBack = (subscriptionId: string, token: string | undefined, numbers: ReadonlyArray<bigint>) =>
  Effect.gen(function* () {
    if (token === undefined || numbers.length === 0) return token
    const sorted = [...numbers].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0))
    const first = sorted[0]!
    const last = sorted.at(-1)!
    const next = newToken()
    const sql = yield* SqlClient.SqlClient
    const [row] = yield* sql<{ passed: boolean }>`
      WITH back AS (
        UPDATE webhook_subscriptions SET last_sequence = ${(first - 1n).toString()}::bigint, numbered_by = ${next}::uuid
        WHERE id = ${subscriptionId}::uuid AND numbered_by = ${token}::uuid
          AND last_sequence = ${last.toString()}::bigint
        RETURNING id
      ), freed AS (
        UPDATE webhook_deliveries SET sequence = NULL
        WHERE subscription_id = ${subscriptionId}::uuid
          AND sequence BETWEEN ${first.toString()}::bigint AND ${last.toString()}::bigint
          AND EXISTS (SELECT 1 FROM back)
        RETURNING id
      )
      SELECT EXISTS (SELECT 1 FROM back) AS passed`.pipe(
      Effect.withSpan("WebhookNumbering.giveBack", { attributes: { "webhook.deliveries": numbers.length } }),
    )
    return row?.passed === true ? next : undefined
  })
