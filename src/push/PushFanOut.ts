/**
 * The `push` consumer: in each round, every event gets one `push.batch` job per batch of at most
 * `push.batch_size` registrations of its recipients (`PushAudience`), in the round's transaction,
 * unique per (event seq, the batch's first registration) by the round's unique key. The
 * registrations of an event are batched in id order, so the same round over the same rows makes
 * the same batches. There is no ordering to keep (the latest notification wins), so the jobs of
 * one round run in parallel, and so do the messages of one job (`PushDelivery`).
 *
 * With the default audience (or any that answers in SQL) the round is one statement
 * (`StatementRound`): events, audience, registrations and jobs; otherwise the audience answers for
 * the whole batch in one call and the registrations of its principals are read in one more.
 *
 * Loss: push keeps no per-receiver state that a gap could make wrong (each message stands alone),
 * so a lost range is logged and counted (`bothy.push.events_lost`), never replayed, and the round
 * goes on.
 */
import { Array as Arr, type Duration, Effect, Layer, Metric } from "effect"
import { SqlClient } from "effect/sql"
import * as Consumer from "../consumer/Consumer.ts"
import type { FanOutJob, LostRange, RoundOf } from "../consumer/ConsumerRound.ts"
import * as StatementRound from "../consumer/StatementRound.ts"
import type { Event } from "../log/Event.ts"
import { testEventType } from "../log/TestEvent.ts"
import { PushAudience, type PushAudienceShape } from "./PushAudience.ts"
import { PushConfig } from "./PushConfig.ts"
import { type BatchArgs, batchArgsInSql, batchReceiverPrefix, defaultBatchSize, deliverKind, queue } from "./PushJob.ts"
import * as PushMetrics from "./PushMetrics.ts"
import * as PushSchedule from "./PushSchedule.ts"

export const name = "push"
/** The job the round inserts (`PushJob`), also named here as `WebhookFanOut` names the drain job. */
export { deliverKind, queue }

/**
 * The jobs for recipients found in SQL as `audience (seq, principal)`: their registrations per
 * event in id order, numbered, cut every `perJob`.
 */
export const statementFanOut = (
  audience: PushAudienceShape,
  maxAttempts: number,
  perJob: number,
): StatementRound.StatementFanOut => ({
  ctes: (sql) => {
    const args = batchArgsInSql(sql, {
      seq: sql`t.seq::text`,
      at: sql`e.occurred_at`,
      registrations: sql`jsonb_agg(t.id::text ORDER BY t.id)`,
    })
    return sql`
    audience AS (${audience.inSql!(sql)}), targets AS (
      SELECT a.seq, r.id, (row_number() OVER (PARTITION BY a.seq ORDER BY r.id) - 1) / ${perJob}::int AS batch
      FROM audience AS a JOIN push_registrations AS r ON r.principal = a.principal
    ), wanted AS (
      SELECT t.seq, ${batchReceiverPrefix}::text || min(t.id)::text AS receiver, ${deliverKind}::text AS kind,
             ${queue}::text AS queue, ${args} AS args, ${maxAttempts}::int AS max_attempts
      FROM targets AS t JOIN ev AS e ON e.seq = t.seq
      WHERE e.type <> ${testEventType}
      GROUP BY t.seq, t.batch, e.occurred_at
    )`
  },
})

/** The same jobs, from the audience's answer for the batch and one read of its principals' registrations. */
export const makeFanOut = (audience: PushAudienceShape, maxAttempts: number, perJob: number) =>
  Effect.fn("PushFanOut.fanOut")(function* (all: Arr.NonEmptyReadonlyArray<Event>) {
    // A test event is for the webhook subscription it names: nobody is notified of it.
    const events = all.filter((e) => e.type !== testEventType)
    if (!Arr.isArrayNonEmpty(events)) return []
    const recipients = yield* audience.recipients(events)
    if (recipients.length === 0) return []
    const sql = yield* SqlClient.SqlClient
    const principals = [...new Set(recipients.map((r) => r.principal))]
    const registrations = yield* sql<{ id: string; principal: string }>`
      SELECT id::text AS id, principal FROM push_registrations WHERE principal = ANY (${principals}::text[])`
    const byPrincipal = Map.groupBy(registrations, (r) => r.principal)
    const bySeq = new Map<bigint, Array<bigint>>()
    for (const { seq, principal } of recipients) {
      const ids = bySeq.get(seq) ?? []
      for (const r of byPrincipal.get(principal) ?? []) ids.push(BigInt(r.id))
      bySeq.set(seq, ids)
    }
    const times = new Map(events.map((e) => [e.seq, e.occurredAt.toISOString()]))
    return [...bySeq].flatMap(([seq, ids]) => {
      const sorted = [...new Set(ids)].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0)).map(String)
      return Array.from({ length: Math.ceil(sorted.length / perJob) }, (_, i): FanOutJob => {
        const batch = sorted.slice(i * perJob, (i + 1) * perJob)
        return {
          seq,
          receiver: `${batchReceiverPrefix}${batch[0]}`,
          kind: deliverKind,
          queue,
          args: { seq: seq.toString(), at: times.get(seq)!, registrations: batch } satisfies BatchArgs,
          maxAttempts,
        }
      })
    })
  })

export const onLoss = (lost: LostRange) =>
  Effect.andThen(
    Metric.update(PushMetrics.eventsLost, Number(lost.lastSeq - lost.firstSeq + 1n)),
    Effect.logError(
      `push: events ${lost.firstSeq}..${lost.lastSeq} left the log before their notifications were made; they are not sent (counted in bothy.push.events_lost)`,
    ),
  )

/** The `push` round's options for `Consumer.makeRound` (and, with a poll interval, `Consumer.layer`). */
export const roundOptions = (
  audience: PushAudienceShape,
  ttl: Duration.Duration,
  batchSize: number,
  perJob: number = defaultBatchSize,
) => {
  const maxAttempts = PushSchedule.maxAttempts(ttl)
  return {
    name,
    batchSize,
    fanOut: makeFanOut(audience, maxAttempts, perJob),
    ...(audience.inSql === undefined
      ? {}
      : {
          oneStatement: (round: RoundOf) =>
            StatementRound.make({ ...round, fanOut: statementFanOut(audience, maxAttempts, perJob) }),
        }),
    onLoss,
  }
}

export const layer = (options: {
  readonly batchSize: number
  readonly pollInterval: Duration.Input
  readonly cooldown?: Duration.Input
}) =>
  Layer.unwrap(
    Effect.gen(function* () {
      const audience = yield* PushAudience
      const { ttl, batchSize: perJob } = yield* PushConfig
      // Exported at 0 from the start, as the consumer's own counters are: an increase over a
      // window is then a loss, and the series never has to appear first.
      yield* Metric.update(PushMetrics.eventsLost, 0)
      return Consumer.layer({
        ...roundOptions(audience, ttl, options.batchSize, perJob ?? defaultBatchSize),
        pollInterval: options.pollInterval,
        cooldown: options.cooldown,
      })
    }),
  )
