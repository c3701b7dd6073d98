/**
 * The delivery job: one attempt at one webhook delivery, in this order, every time:
 *
 *   lock the subscription row (short transaction; serializes this subscription's deliveries)
 *     not pending any more / subscription disabled ──> done
 *     a lower-seq delivery is pending ──> park (the head wakes it when it finishes) ──> done
 *     the event left the log ──> disable the subscription (`gap`) ──> done
 *     owner lacks `webhook_out.deliver` on the space, or the space left the scope
 *       ──> dead without any request; `last_delivered_seq` moves past it; wake the next
 *   unlock; build the envelope; sign; POST (no transaction is open during the request)
 *   lock again; record the attempt
 *     2xx ──> delivered; `last_delivered_seq` moves forward; failing clock reset; wake the next
 *     410 ──> disable (`gone`)
 *     else ──> failing clock; disable (`failing`) after 5 days, or retry on the schedule
 *
 * So each endpoint receives its events in seq order, one at a time, and a revoked right or a
 * removed space never blocks the queue behind it. Parking is decided and undone under the same
 * row lock, so a wake-up cannot be lost between a delivery deciding to wait and its head finishing.
 */
import { Clock, Duration, Effect, Metric, Option, Schema } from "effect"
import { SqlClient } from "effect/sql"
import * as JobKind from "./JobKind.ts"
import { Jobs } from "./Jobs.ts"
import { Permissions, webhookDeliver } from "./Permissions.ts"
import * as SecretBox from "./SecretBox.ts"
import { WebhookConfig } from "./WebhookConfig.ts"
import * as WebhookMetrics from "./WebhookMetrics.ts"
import * as WebhookSchedule from "./WebhookSchedule.ts"
import * as WebhookSender from "./WebhookSender.ts"
import * as WebhookSignature from "./WebhookSignature.ts"
import { disable } from "./WebhookSubscriptions.ts"
import { deliverKind, deliveryJob } from "./WebhooksConsumer.ts"

/** Hard cap of a request body. */
export const maxBodyBytes = 64 * 1024

interface Claimed {
  readonly deliveryId: bigint
  readonly subscriptionId: string
  readonly url: string
  readonly secretSealed: string
  readonly previousSecretSealed: string | null
  readonly previousSecretUntil: Date | null
  readonly eventSeq: bigint
  readonly epoch: number
  readonly sequence: bigint
  readonly attempts: number
  readonly type: string
  readonly space: string
  readonly occurredAt: Date
  readonly payload: unknown
}

export const make = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const jobs = yield* Jobs
  const permissions = yield* Permissions
  const config = yield* WebhookConfig
  const provide = Effect.provideService(SqlClient.SqlClient, sql)

  /** Under the subscription lock: the next pending delivery, if it was parked, gets a job again. */
  const wakeNext = (subscriptionId: string) =>
    Effect.gen(function* () {
      const woken = yield* sql<{ id: bigint }>`
        WITH next AS (
          SELECT id FROM webhook_deliveries
          WHERE subscription_id = ${subscriptionId}::uuid AND state = 'pending'
          ORDER BY event_seq LIMIT 1
        )
        UPDATE webhook_deliveries AS d SET parked = false FROM next WHERE d.id = next.id AND d.parked
        RETURNING d.id`
      if (woken[0] !== undefined) yield* jobs.insert([deliveryJob(woken[0].id)])
    })

  /** Ends a delivery without sending (dead) or after sending (delivered), and lets the next one go. */
  const finish = (
    d: { readonly deliveryId: bigint; readonly subscriptionId: string; readonly eventSeq: bigint },
    state: "delivered" | "dead",
    reason: string | null,
  ) =>
    Effect.gen(function* () {
      yield* sql`
        UPDATE webhook_deliveries SET state = ${state}, dead_reason = ${reason}, finished_at = clock_timestamp()
        WHERE id = ${d.deliveryId}`
      yield* sql`
        UPDATE webhook_subscriptions SET last_delivered_seq = greatest(last_delivered_seq, ${d.eventSeq})
        WHERE id = ${d.subscriptionId}::uuid`
      yield* wakeNext(d.subscriptionId)
    })

  /** Steps before the request, under the subscription's row lock. */
  const prepare = (deliveryId: bigint) =>
    sql.withTransaction(
      Effect.gen(function* () {
        const [sub] = yield* sql<{
          id: string
          owner: string
          url: string
          state: string
          secretSealed: string
          previousSecretSealed: string | null
          previousSecretUntil: Date | null
        }>`
          SELECT s.id::text, s.owner, s.url, s.state, s.secret_sealed AS "secretSealed",
                 s.previous_secret_sealed AS "previousSecretSealed", s.previous_secret_until AS "previousSecretUntil"
          FROM webhook_subscriptions AS s
          WHERE s.id = (SELECT subscription_id FROM webhook_deliveries WHERE id = ${deliveryId})
          FOR UPDATE`
        if (sub === undefined || sub.state !== "active") return Option.none<Claimed>()
        const [d] = yield* sql<{
          state: string
          eventSeq: bigint
          epoch: number
          sequence: bigint
          attempts: number
          head: bigint
        }>`
          SELECT state, event_seq AS "eventSeq", epoch, sequence, attempts,
                 (SELECT min(event_seq) FROM webhook_deliveries
                  WHERE subscription_id = ${sub.id}::uuid AND state = 'pending') AS head
          FROM webhook_deliveries WHERE id = ${deliveryId}`
        if (d === undefined || d.state !== "pending") return Option.none<Claimed>()
        if (d.head < d.eventSeq) {
          yield* sql`UPDATE webhook_deliveries SET parked = true WHERE id = ${deliveryId}`
          return Option.none<Claimed>()
        }
        const [event] = yield* sql<{ type: string; space: string; occurredAt: Date; payload: unknown }>`
          SELECT type, space_id AS space, occurred_at AS "occurredAt", payload FROM event_log WHERE seq = ${d.eventSeq}`
        if (event === undefined) {
          yield* disable([sub.id], "gap").pipe(provide)
          yield* Effect.logError(
            `webhooks: the event of subscription ${sub.id}'s next delivery left the log; disabled with cause gap`,
          )
          return Option.none<Claimed>()
        }
        const ref = { deliveryId, subscriptionId: sub.id, eventSeq: d.eventSeq }
        const allowed = yield* permissions.allowed(sub.owner, webhookDeliver, event.space)
        const [scoped] = yield* sql<{ ok: boolean }>`
          SELECT EXISTS (SELECT 1 FROM webhook_subscription_spaces
                         WHERE subscription_id = ${sub.id}::uuid AND space_id = ${event.space}) AS ok`
        if (!allowed || scoped?.ok !== true) {
          yield* finish(ref, "dead", allowed ? "scope" : "permission")
          yield* Metric.update(WebhookMetrics.suppressed, 1)
          yield* Metric.update(Metric.withAttributes(WebhookMetrics.attempts, { outcome: "suppressed" }), 1)
          return Option.none<Claimed>()
        }
        return Option.some<Claimed>({
          ...ref,
          url: sub.url,
          secretSealed: sub.secretSealed,
          previousSecretSealed: sub.previousSecretSealed,
          previousSecretUntil: sub.previousSecretUntil,
          epoch: d.epoch,
          sequence: d.sequence,
          attempts: d.attempts,
          ...event,
        })
      }),
    )

  const secretsFor = (c: Claimed, now: number) =>
    Effect.gen(function* () {
      const current = yield* SecretBox.open(config.secretKey, c.secretSealed)
      const previous =
        c.previousSecretSealed !== null && c.previousSecretUntil !== null && c.previousSecretUntil.getTime() > now
          ? [yield* SecretBox.open(config.secretKey, c.previousSecretSealed)]
          : []
      return [current, ...previous] as const
    })

  /** One attempt; a retry comes back as `JobSnooze` so it spends no job attempt. */
  const deliver = Effect.fn("WebhookDelivery.deliver")(function* (deliveryId: bigint) {
    const claimed = yield* prepare(deliveryId)
    if (Option.isNone(claimed)) return
    const c = claimed.value
    const body = JSON.stringify({
      version: 1,
      type: c.type,
      timestamp: c.occurredAt.toISOString(),
      sequence: Number(c.sequence),
      space: c.space,
      data: c.payload,
    })
    const started = yield* Clock.currentTimeMillis
    const id = WebhookSignature.messageId(c.epoch, c.subscriptionId, c.sequence)
    const headers = yield* WebhookSignature.sign(
      { id, timestamp: new Date(started), body },
      yield* secretsFor(c, started),
    )
    const result = yield* WebhookSender.send(
      { url: c.url, headers: { ...headers, "content-type": "application/json" }, body },
      config.policy,
    )
    const now = yield* Clock.currentTimeMillis
    const ok = result.status !== undefined && result.status >= 200 && result.status < 300
    const snooze = yield* sql.withTransaction(
      Effect.gen(function* () {
        const [sub] = yield* sql<{ state: string; firstAt: Date | null; clockAt: Date | null }>`
          SELECT state, failing_first_at AS "firstAt", failing_clock_at AS "clockAt"
          FROM webhook_subscriptions WHERE id = ${c.subscriptionId}::uuid FOR UPDATE`
        yield* sql`
          INSERT INTO webhook_attempts (delivery_id, number, started_at, duration_ms, status, error_class, response_body, response_truncated)
          VALUES (${deliveryId}, ${c.attempts + 1}, ${new Date(started)}, ${result.durationMs}, ${result.status ?? null},
                  ${result.errorClass ?? null}, ${result.body.replaceAll("\u0000", "\uFFFD")}, ${result.truncated})`
        const [still] = yield* sql<{ state: string }>`
          UPDATE webhook_deliveries SET attempts = attempts + 1, last_status = ${result.status ?? null},
                 last_error_class = ${result.errorClass ?? null}, last_attempt_at = ${new Date(started)}
          WHERE id = ${deliveryId} RETURNING state`
        // Disabled meanwhile (its pending deliveries ended with it): the attempt is on record, nothing else.
        if (sub?.state !== "active" || still?.state !== "pending") return Option.none<Duration.Duration>()
        if (ok) {
          yield* finish(c, "delivered", null)
          yield* sql`
            UPDATE webhook_subscriptions SET failing_first_at = NULL, failing_clock_at = NULL
            WHERE id = ${c.subscriptionId}::uuid`
          yield* Metric.update(Metric.withAttributes(WebhookMetrics.attempts, { outcome: "delivered" }), 1)
          yield* Metric.update(WebhookMetrics.latency, now - c.occurredAt.getTime())
          return Option.none<Duration.Duration>()
        }
        if (result.status === 410) {
          yield* disable([c.subscriptionId], "gone").pipe(provide)
          yield* Metric.update(Metric.withAttributes(WebhookMetrics.attempts, { outcome: "gone" }), 1)
          return Option.none<Duration.Duration>()
        }
        yield* Metric.update(Metric.withAttributes(WebhookMetrics.attempts, { outcome: "failed" }), 1)
        const clock = WebhookSchedule.afterFailure(
          { firstAt: sub.firstAt?.getTime() ?? null, clockAt: sub.clockAt?.getTime() ?? null },
          now,
        )
        if (clock.disable) {
          yield* disable([c.subscriptionId], "failing").pipe(provide)
          return Option.none<Duration.Duration>()
        }
        yield* sql`
          UPDATE webhook_subscriptions
          SET failing_first_at = ${new Date(clock.firstAt!)},
              failing_clock_at = ${clock.clockAt === null ? null : new Date(clock.clockAt)}
          WHERE id = ${c.subscriptionId}::uuid`
        return Option.some(
          WebhookSchedule.nextDelay(
            {
              attempt: c.attempts + 1,
              status: result.status,
              errorClass: result.errorClass,
              retryAfter: result.retryAfter,
              now,
            },
            Math.random,
            config.retrySteps,
          ),
        )
      }),
    )
    yield* Metric.update(
      Metric.withAttributes(WebhookMetrics.headAge, { subscription: c.subscriptionId }),
      ok ? 0 : Math.max(0, (now - c.occurredAt.getTime()) / 1000),
    )
    if (Option.isSome(snooze)) return yield* new JobKind.JobSnooze({ delay: snooze.value })
  })

  return JobKind.make({
    kind: deliverKind,
    args: Schema.Struct({ delivery: Schema.String.check(Schema.isPattern(/^\d+$/)) }),
    timeout: Duration.minutes(1),
    run: ({ delivery }) => deliver(BigInt(delivery)),
  })
})
