/**
 * The `push` consumer: in each round, every event gets one `push.deliver` job per registration of
 * each of its recipients (`PushAudience`), in the round's transaction, unique per (registration,
 * event seq) by the round's unique key. There is no ordering to keep (the latest notification wins),
 * so each message is a job of its own, and the jobs of one round run in parallel.
 *
 * With the default audience (or any that answers in SQL) the round is one statement
 * (`StatementRound`): events, audience, registrations and jobs; otherwise the audience answers for
 * the whole batch in one call and the registrations of its principals are read in one more.
 *
 * Loss: push keeps no per-receiver state that a gap could make wrong (each message stands alone),
 * so a lost range is logged and counted (`bothy.push.events_lost`), never replayed, and the round
 * goes on.
 */
import { type Array as Arr, type Duration, Effect, Layer, Metric } from "effect"
import { SqlClient } from "effect/sql"
import * as Consumer from "../consumer/Consumer.ts"
import type { FanOutJob, LostRange, RoundOf } from "../consumer/ConsumerRound.ts"
import * as StatementRound from "../consumer/StatementRound.ts"
import type { Event } from "../log/Event.ts"
import { PushAudience, type PushAudienceShape } from "./PushAudience.ts"
import { PushConfig } from "./PushConfig.ts"
import { type DeliverArgs, deliverArgsInSql, deliverKind, queue } from "./PushJob.ts"
import * as PushMetrics from "./PushMetrics.ts"
import * as PushSchedule from "./PushSchedule.ts"

export const name = "push"
/** The job the round inserts (`PushJob`), also named here as `WebhookFanOut` names the drain job. */
export { deliverKind, queue }

/** The jobs for recipients found in SQL as `audience (seq, principal)`, one per registration. */
export const statementFanOut = (audience: PushAudienceShape, maxAttempts: number): StatementRound.StatementFanOut => ({
  ctes: (sql) => {
    const args = deliverArgsInSql(sql, { registration: sql`r.id::text`, seq: sql`a.seq::text`, at: sql`e.occurred_at` })
    return sql`
    audience AS (${audience.inSql!(sql)}), wanted AS (
      SELECT a.seq, r.id::text AS receiver, ${deliverKind}::text AS kind, ${queue}::text AS queue, ${args} AS args,
             ${maxAttempts}::int AS max_attempts
      FROM audience AS a JOIN ev AS e ON e.seq = a.seq JOIN push_registrations AS r ON r.principal = a.principal
    )`
  },
})

/** The same jobs, from the audience's answer for the batch and one read of its principals' registrations. */
export const makeFanOut = (audience: PushAudienceShape, maxAttempts: number) =>
  Effect.fn("PushFanOut.fanOut")(function* (events: Arr.NonEmptyReadonlyArray<Event>) {
    const recipients = yield* audience.recipients(events)
    if (recipients.length === 0) return []
    const sql = yield* SqlClient.SqlClient
    const principals = [...new Set(recipients.map((r) => r.principal))]
    const registrations = yield* sql<{ id: string; principal: string }>`
      SELECT id::text AS id, principal FROM push_registrations WHERE principal = ANY (${principals}::text[])`
    const byPrincipal = Map.groupBy(registrations, (r) => r.principal)
    const times = new Map(events.map((e) => [e.seq, e.occurredAt.toISOString()]))
    return recipients.flatMap(({ seq, principal }) =>
      (byPrincipal.get(principal) ?? []).map(
        (r): FanOutJob => ({
          seq,
          receiver: r.id,
          kind: deliverKind,
          queue,
          args: { registration: r.id, seq: seq.toString(), at: times.get(seq)! } satisfies DeliverArgs,
          maxAttempts,
        }),
      ),
    )
  })

export const onLoss = (lost: LostRange) =>
  Effect.andThen(
    Metric.update(PushMetrics.eventsLost, Number(lost.lastSeq - lost.firstSeq + 1n)),
    Effect.logError(
      `push: events ${lost.firstSeq}..${lost.lastSeq} left the log before their notifications were made; they are not sent (counted in bothy.push.events_lost)`,
    ),
  )

/** The `push` round's options for `Consumer.makeRound` (and, with a poll interval, `Consumer.layer`). */
export const roundOptions = (audience: PushAudienceShape, ttl: Duration.Duration, batchSize: number) => {
  const maxAttempts = PushSchedule.maxAttempts(ttl)
  return {
    name,
    batchSize,
    fanOut: makeFanOut(audience, maxAttempts),
    ...(audience.inSql === undefined
      ? {}
      : {
          oneStatement: (round: RoundOf) =>
            StatementRound.make({ ...round, fanOut: statementFanOut(audience, maxAttempts) }),
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
      const { ttl } = yield* PushConfig
      // Exported at 0 from the start, as the consumer's own counters are: an increase over a
      // window is then a loss, and the series never has to appear first.
      yield* Metric.update(PushMetrics.eventsLost, 0)
      return Consumer.layer({
        ...roundOptions(audience, ttl, options.batchSize),
        pollInterval: options.pollInterval,
        cooldown: options.cooldown,
      })
    }),
  )
