/**
 * The drain job: sends one subscription's pending deliveries, one at a time in seq order, as long
 * as it holds the subscription's drain slot (`webhook_drains.job_id`).
 *
 *   acquire the slot ── held by another live job ──> done (that one sends what is pending)
 *   loop:
 *     take the head: the lowest pending delivery with its subscription and event (one statement)
 *       none ──> release the slot unless something is pending after all ──> done
 *       subscription disabled meanwhile, or left over from before a re-enable ──> end them dead
 *       the event left the log ──> disable the subscription (`gap`)
 *       owner lacks `webhook_out.deliver` on the space, or the space left the scope
 *         ──> dead without any request; `last_delivered_seq` moves past it
 *     build the envelope; sign; POST (no transaction is open during the request)
 *     record the attempt (one statement)
 *       2xx ──> delivered; `last_delivered_seq` moves forward; failing clock reset; next
 *       410 ──> disable (`gone`)
 *       else ──> failing clock; disable (`failing`) after 5 days, or snooze for the schedule's
 *                delay KEEPING the slot, so nothing behind it is sent meanwhile
 *     after a bound per run (deliveries or time) ──> snooze 0 keeping the slot (the job's timeout
 *       never fires in normal work; other subscriptions get the worker slots in turn)
 *
 * A run whose job id holds the slot continues where it stopped (after a snooze, a retry, or a
 * rescue after a crash, the same job id runs again). A slot whose job no longer exists or is
 * completed, cancelled or discarded is free. A drainer never fails for good: on its last attempt
 * a failure becomes a long snooze instead of a discard, so a slot is not left to a dead job.
 *
 * No lost wake-up. Claim: once a pending delivery D is committed, either a live drainer will take
 * it or a job exists that will acquire the slot and take it. All parties meet on the slot's row
 * lock:
 * - the round that creates D bumps the subscription's `sequence` on the same row, so it holds the
 *   row lock from before D exists until D commits, and reads the holder under it. If a live job
 *   holds the slot the round creates no job (`WebhooksConsumer.skipHeld`); otherwise it creates
 *   one, committed with D.
 * - a drainer releases only inside a transaction that first locks the row and then, in a
 *   statement started after the lock was granted (so its snapshot includes every round that held
 *   the lock before), finds nothing pending. A release that got the lock before the round's bump
 *   commits before the round reads the holder: the round sees the slot free and creates a job. A
 *   release that got the lock after it sees D and does not release: the drainer goes on to D.
 * - an acquirer takes the same lock (a plain UPDATE when the slot is free or its own, else a
 *   locking read followed by a fresh statement judging whether the holder lives). Either it gets
 *   the slot and its next take (a later statement) sees D, or a live holder has it and, by the
 *   previous point, that holder sees D before it can let go.
 * A holder that stays live keeps running again (snooze, retry, rescue) until it releases. The
 * test `WebhookDrainNoLostWakeup` races many short rounds against finishing drainers.
 *
 * So each endpoint receives its events in seq order, one at a time, and a revoked right or a
 * removed space never blocks the queue behind it. Besides the request, a delivery costs the
 * permission check (one statement with the default `PermissionGrants`), the record, and a share
 * of a take (which reads up to `readAhead` heads). While a request is in flight the drainer checks
 * the next head's right (and takes more heads when it has none left; reads only, no transaction),
 * so a busy subscription waits only for the request and the record between two deliveries; the
 * right is still checked before that delivery's request, the scope when its head was read.
 */
import { Cause, Clock, Duration, Effect, Metric, Option, type Redacted, Schema } from "effect"
import { SqlClient } from "effect/sql"
import * as JobKind from "./JobKind.ts"
import { Permissions, webhookDeliver } from "./Permissions.ts"
import * as SecretBox from "./SecretBox.ts"
import { WebhookConfig } from "./WebhookConfig.ts"
import * as WebhookMetrics from "./WebhookMetrics.ts"
import * as WebhookSchedule from "./WebhookSchedule.ts"
import * as WebhookSender from "./WebhookSender.ts"
import * as WebhookSignature from "./WebhookSignature.ts"
import { disable } from "./WebhookSubscriptions.ts"
import { deliverKind } from "./WebhooksConsumer.ts"

/** Hard cap of a request body. */
export const maxBodyBytes = 64 * 1024

export interface DrainOptions {
  /** Deliveries one run handles before it snoozes 0 to let other jobs run. Default 500. */
  readonly maxDeliveriesPerRun?: number
  /** Time after which a run snoozes 0 before its next delivery. Default 5 s (the job timeout is 1 min). */
  readonly maxRunTime?: Duration.Input
  /**
   * Pending deliveries read per take, default 4: fewer statements per delivery, at the price of
   * a delivery's scope (not its permission, checked just before) being read up to this many
   * deliveries before its request.
   */
  readonly readAhead?: number
}

/** How long a drainer waits after an infrastructure failure on its last job attempt. */
const lastAttemptSnooze = Duration.minutes(10)

const uuid = Schema.String.check(Schema.isPattern(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i))

/** The head delivery of a subscription, with everything needed to send it. */
interface Head {
  readonly deliveryId: bigint
  readonly eventSeq: bigint
  readonly epoch: number
  readonly sequence: bigint
  readonly attempts: number
  readonly state: "active" | "disabled"
  readonly disabledCause: string | null
  readonly startedSeq: bigint
  readonly owner: string
  readonly url: string
  readonly secretSealed: string
  readonly previousSecretSealed: string | null
  readonly previousSecretUntil: Date | null
  readonly failingFirstAt: Date | null
  readonly failingClockAt: Date | null
  readonly present: boolean
  readonly type: string | null
  readonly space: string | null
  readonly occurredAt: Date | null
  readonly payload: unknown
  readonly scoped: boolean
}

type Recorded = "delivered" | "pending" | "dead"

const attemptsBy = (outcome: string) => Metric.update(Metric.withAttributes(WebhookMetrics.attempts, { outcome }), 1)

export const makeWith = (options: DrainOptions = {}) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const permissions = yield* Permissions
    const config = yield* WebhookConfig
    const provide = Effect.provideService(SqlClient.SqlClient, sql)
    const maxDeliveries = options.maxDeliveriesPerRun ?? 500
    const maxRunMillis = Duration.toMillis(Duration.fromInputUnsafe(options.maxRunTime ?? Duration.seconds(5)))
    const readAhead = Math.max(1, options.readAhead ?? 4)

    /** Takes the slot when it is free or already this job's; false when another live job holds it. */
    const acquire = (subscriptionId: string, job: bigint) =>
      Effect.gen(function* () {
        const taken = yield* sql`
          UPDATE webhook_drains SET job_id = ${job}
          WHERE subscription_id = ${subscriptionId}::uuid AND (job_id IS NULL OR job_id = ${job})
          RETURNING job_id`
        if (taken.length > 0) return true
        // Held by another job: under the row lock, a statement started after it judges the holder.
        return yield* sql.withTransaction(
          Effect.gen(function* () {
            const [row] = yield* sql<{ jobId: bigint | null }>`
              SELECT job_id AS "jobId" FROM webhook_drains WHERE subscription_id = ${subscriptionId}::uuid FOR UPDATE`
            if (row === undefined) return false
            if (row.jobId !== null && row.jobId !== job) {
              const [holder] = yield* sql<{ live: boolean }>`
                SELECT EXISTS (
                  SELECT 1 FROM jobs WHERE id = ${row.jobId} AND state IN ('available', 'scheduled', 'running', 'retryable')
                ) AS live`
              if (holder?.live === true) return false
            }
            yield* sql`UPDATE webhook_drains SET job_id = ${job} WHERE subscription_id = ${subscriptionId}::uuid`
            return true
          }),
        )
      })

    /**
     * Lets the slot go if nothing is pending, checked under the row lock by a statement started
     * after it (see the header). `pending`: keep draining.
     */
    const release = (subscriptionId: string, job: bigint) =>
      sql.withTransaction(
        Effect.gen(function* () {
          const [row] = yield* sql<{ jobId: bigint | null }>`
            SELECT job_id AS "jobId" FROM webhook_drains WHERE subscription_id = ${subscriptionId}::uuid FOR UPDATE`
          if (row === undefined || row.jobId !== job) return "lost" as const
          const freed = yield* sql`
            UPDATE webhook_drains SET job_id = NULL
            WHERE subscription_id = ${subscriptionId}::uuid AND job_id = ${job}
              AND NOT EXISTS (
                SELECT 1 FROM webhook_deliveries WHERE subscription_id = ${subscriptionId}::uuid AND state = 'pending')
            RETURNING subscription_id`
          return freed.length > 0 ? ("released" as const) : ("pending" as const)
        }),
      )

    /**
     * The head deliveries while this job holds the slot: up to `limit` pending ones in seq order
     * (after `after`, when given); none when nothing is pending or the slot is lost.
     */
    const take = (subscriptionId: string, job: bigint, after: bigint, limit: number) =>
      sql<Head>`
        SELECT d.id AS "deliveryId", d.event_seq AS "eventSeq", d.epoch, d.sequence, d.attempts,
               s.state, s.disabled_cause AS "disabledCause", s.started_seq AS "startedSeq", s.owner, s.url,
               s.secret_sealed AS "secretSealed", s.previous_secret_sealed AS "previousSecretSealed",
               s.previous_secret_until AS "previousSecretUntil",
               s.failing_first_at AS "failingFirstAt", s.failing_clock_at AS "failingClockAt",
               e.seq IS NOT NULL AS present, e.type, e.space_id AS space, e.occurred_at AS "occurredAt", e.payload,
               EXISTS (SELECT 1 FROM webhook_subscription_spaces AS ss
                       WHERE ss.subscription_id = s.id AND ss.space_id = e.space_id) AS scoped
        FROM webhook_drains AS w
        JOIN webhook_subscriptions AS s ON s.id = w.subscription_id
        CROSS JOIN LATERAL (
          SELECT * FROM webhook_deliveries
          WHERE subscription_id = w.subscription_id AND state = 'pending' AND event_seq > ${after}
          ORDER BY event_seq LIMIT ${limit}
        ) AS d
        LEFT JOIN event_log AS e ON e.seq = d.event_seq
        WHERE w.subscription_id = ${subscriptionId}::uuid AND w.job_id = ${job}`.pipe(
        Effect.withSpan("WebhookDelivery.take"),
      )

    /** Ends pending deliveries that must not go out: the subscription is disabled, or they predate its re-enabling. */
    const endLeftovers = (subscriptionId: string, h: Head) =>
      h.state !== "active"
        ? sql`
            UPDATE webhook_deliveries
            SET state = 'dead', dead_reason = ${`disabled:${h.disabledCause ?? "manual"}`}, finished_at = clock_timestamp()
            WHERE subscription_id = ${subscriptionId}::uuid AND state = 'pending'`
        : sql`
            UPDATE webhook_deliveries SET state = 'dead', dead_reason = 'stale', finished_at = clock_timestamp()
            WHERE subscription_id = ${subscriptionId}::uuid AND state = 'pending' AND event_seq <= ${h.startedSeq}`

    /** Dead without a request; `last_delivered_seq` moves past it so it never blocks the queue. */
    const suppress = (subscriptionId: string, h: Head, reason: "permission" | "scope") =>
      Effect.gen(function* () {
        yield* sql`
          WITH d AS (
            UPDATE webhook_deliveries SET state = 'dead', dead_reason = ${reason}, finished_at = clock_timestamp()
            WHERE id = ${h.deliveryId} AND state = 'pending'
            RETURNING event_seq
          )
          UPDATE webhook_subscriptions AS s SET last_delivered_seq = greatest(s.last_delivered_seq, d.event_seq)
          FROM d WHERE s.id = ${subscriptionId}::uuid`
        yield* Metric.update(WebhookMetrics.suppressed, 1)
        yield* attemptsBy("suppressed")
      })

    /**
     * The attempt, the delivery's new state and the subscription's progress and failing clock, in
     * one statement. A delivery that is no longer pending (its subscription was disabled while the
     * request ran) gets the attempt on record and nothing else.
     */
    const record = (
      subscriptionId: string,
      h: Head,
      started: number,
      result: WebhookSender.SendResult,
      ok: boolean,
      failing: { readonly firstAt: number | null; readonly clockAt: number | null },
    ) =>
      sql<{ state: Recorded }>`
        WITH attempt AS (
          INSERT INTO webhook_attempts
            (delivery_id, number, started_at, duration_ms, status, error_class, response_body, response_truncated)
          VALUES (${h.deliveryId}, ${h.attempts + 1}, ${new Date(started)}, ${result.durationMs},
                  ${result.status ?? null}, ${result.errorClass ?? null},
                  ${result.body.replaceAll("\u0000", "\uFFFD")}, ${result.truncated})
        ), d AS (
          UPDATE webhook_deliveries
          SET attempts = attempts + 1, last_status = ${result.status ?? null},
              last_error_class = ${result.errorClass ?? null}, last_attempt_at = ${new Date(started)},
              state = CASE WHEN ${ok} AND state = 'pending' THEN 'delivered' ELSE state END,
              finished_at = CASE WHEN ${ok} AND state = 'pending' THEN clock_timestamp() ELSE finished_at END
          WHERE id = ${h.deliveryId}
          RETURNING state
        ), s AS (
          UPDATE webhook_subscriptions
          SET last_delivered_seq = CASE WHEN ${ok} THEN greatest(last_delivered_seq, ${h.eventSeq}) ELSE last_delivered_seq END,
              failing_first_at = ${failing.firstAt === null ? null : new Date(failing.firstAt)},
              failing_clock_at = ${failing.clockAt === null ? null : new Date(failing.clockAt)}
          FROM d WHERE id = ${subscriptionId}::uuid AND d.state IN ('delivered', 'pending')
          RETURNING id
        )
        SELECT state FROM d`.pipe(
        Effect.map((rows) => rows[0]?.state ?? "dead"),
        Effect.withSpan("WebhookDelivery.record"),
      )

    /** What one run shares between its deliveries: keep-alive connections, opened secrets. */
    interface Run {
      readonly connections: WebhookSender.Connections
      readonly secrets: Map<string, Redacted.Redacted<string>>
    }

    const openSecret = (run: Run, sealed: string) =>
      Effect.gen(function* () {
        const known = run.secrets.get(sealed)
        if (known !== undefined) return known
        const opened = yield* SecretBox.open(config.secretKey, sealed)
        run.secrets.set(sealed, opened)
        return opened
      })

    const secretsFor = (run: Run, h: Head, now: number) =>
      Effect.gen(function* () {
        const current = yield* openSecret(run, h.secretSealed)
        const previous =
          h.previousSecretSealed !== null && h.previousSecretUntil !== null && h.previousSecretUntil.getTime() > now
            ? [yield* openSecret(run, h.previousSecretSealed)]
            : []
        return [current, ...previous] as const
      })

    /** Whether the head can be sent as far as the row says: anything else is settled by `settle`. */
    const sendable = (h: Head) => h.state === "active" && h.eventSeq > h.startedSeq && h.present && h.scoped

    /** Settles a head that is not to be sent: leftovers, the event gone, the scope left. */
    const settle = (subscriptionId: string, h: Head) =>
      Effect.gen(function* () {
        if (h.state !== "active" || h.eventSeq <= h.startedSeq) return yield* endLeftovers(subscriptionId, h)
        if (!h.present) {
          yield* disable([subscriptionId], "gap").pipe(provide)
          return yield* Effect.logError(
            `webhooks: the event of subscription ${subscriptionId}'s next delivery left the log; disabled with cause gap`,
          )
        }
        yield* suppress(subscriptionId, h, "scope")
      })

    /** A head with the owner's right on its space, checked for this attempt. */
    interface Checked {
      readonly head: Head
      readonly allowed: boolean | undefined
    }

    const check = (h: Head) =>
      sendable(h)
        ? Effect.map(
            permissions.allowed(h.owner, webhookDeliver, h.space!),
            (allowed): Checked => ({ head: h, allowed }),
          )
        : Effect.succeed<Checked>({ head: h, allowed: undefined })

    /**
     * The attempt on a sendable, permitted head. `delivered`: go on with the next; `settled`: it
     * is dead or the subscription disabled, take the head afresh; `snooze`: retry after the delay.
     */
    const attempt = (run: Run, subscriptionId: string, h: Head) =>
      Effect.gen(function* () {
        const occurredAt = h.occurredAt!.getTime()
        const body = JSON.stringify({
          version: 1,
          type: h.type,
          timestamp: h.occurredAt!.toISOString(),
          sequence: Number(h.sequence),
          space: h.space,
          data: h.payload,
        })
        const started = yield* Clock.currentTimeMillis
        const id = WebhookSignature.messageId(h.epoch, subscriptionId, h.sequence)
        const headers = yield* WebhookSignature.sign(
          { id, timestamp: new Date(started), body },
          yield* secretsFor(run, h, started),
        )
        const result = yield* WebhookSender.send(
          { url: h.url, headers: { ...headers, "content-type": "application/json" }, body },
          config.policy,
          {},
          run.connections,
        )
        const now = yield* Clock.currentTimeMillis
        const ok = result.status !== undefined && result.status >= 200 && result.status < 300
        const headAge = (age: number) =>
          Metric.update(Metric.withAttributes(WebhookMetrics.headAge, { subscription: subscriptionId }), age)
        if (ok) {
          const state = yield* record(subscriptionId, h, started, result, true, { firstAt: null, clockAt: null })
          yield* headAge(0)
          if (state !== "delivered") return { _tag: "settled" } as const
          yield* attemptsBy("delivered")
          yield* Metric.update(WebhookMetrics.latency, now - occurredAt)
          return { _tag: "delivered" } as const
        }
        yield* headAge(Math.max(0, (now - occurredAt) / 1000))
        if (result.status === 410) {
          const current = { firstAt: h.failingFirstAt?.getTime() ?? null, clockAt: h.failingClockAt?.getTime() ?? null }
          const state = yield* record(subscriptionId, h, started, result, false, current)
          if (state === "pending") {
            yield* disable([subscriptionId], "gone").pipe(provide)
            yield* attemptsBy("gone")
          }
          return { _tag: "settled" } as const
        }
        const clock = WebhookSchedule.afterFailure(
          { firstAt: h.failingFirstAt?.getTime() ?? null, clockAt: h.failingClockAt?.getTime() ?? null },
          now,
        )
        const state = yield* record(subscriptionId, h, started, result, false, clock)
        if (state !== "pending") return { _tag: "settled" } as const
        yield* attemptsBy("failed")
        if (clock.disable) {
          yield* disable([subscriptionId], "failing").pipe(provide)
          return { _tag: "settled" } as const
        }
        const delay = WebhookSchedule.nextDelay(
          {
            attempt: h.attempts + 1,
            status: result.status,
            errorClass: result.errorClass,
            retryAfter: result.retryAfter,
            now,
          },
          Math.random,
          config.retrySteps,
        )
        return { _tag: "snooze", delay } as const
      }).pipe(
        Effect.withSpan("WebhookDelivery.attempt", {
          attributes: { "webhook.subscription": subscriptionId, "webhook.event_seq": String(h.eventSeq) },
        }),
      )

    const drain = Effect.fn("WebhookDelivery.drain")(function* (subscriptionId: string, job: JobKind.JobInfo) {
      if (!(yield* acquire(subscriptionId, job.id))) return
      const start = yield* Clock.currentTimeMillis
      // Closed when the run ends: no connection outlives the run whose sends checked it.
      const run: Run = { connections: yield* WebhookSender.connections(config.policy), secrets: new Map() }
      // The next head, read and checked while the previous request was in flight, and the heads
      // after it, read with it but not checked yet.
      let next: Checked | undefined
      let ahead: Array<Head> = []
      const takeAndCheck = (after: bigint) =>
        Effect.flatMap(take(subscriptionId, job.id, after, readAhead), (heads) => {
          ahead = heads.slice(1)
          return heads[0] === undefined ? Effect.undefined : check(heads[0])
        })
      for (let n = 0; ; n++) {
        if (n >= maxDeliveries || (yield* Clock.currentTimeMillis) - start >= maxRunMillis) {
          return yield* new JobKind.JobSnooze({ delay: Duration.zero })
        }
        const checked = next ?? (yield* takeAndCheck(-1n))
        next = undefined
        if (checked === undefined) {
          if ((yield* release(subscriptionId, job.id)) !== "pending") return
          continue
        }
        const h = checked.head
        if (!sendable(h)) {
          ahead = []
          yield* settle(subscriptionId, h)
          continue
        }
        if (checked.allowed !== true) {
          ahead = []
          yield* suppress(subscriptionId, h, "permission")
          continue
        }
        // The following delivery's right is checked (and, every few, the following deliveries
        // read) while this request is in flight, so a busy subscription pays the request and the
        // record per delivery, and not the round trips before them.
        const following = ahead.shift()
        const [outcome, prepared] = yield* Effect.all(
          [attempt(run, subscriptionId, h), following === undefined ? takeAndCheck(h.eventSeq) : check(following)],
          { concurrency: 2 },
        )
        if (outcome._tag === "snooze") return yield* new JobKind.JobSnooze({ delay: outcome.delay })
        if (outcome._tag !== "delivered" || prepared === undefined) {
          ahead = []
          continue
        }
        // Read before this delivery's success reset the failing clock.
        const reset = (head: Head): Head => ({ ...head, failingFirstAt: null, failingClockAt: null })
        next = { ...prepared, head: reset(prepared.head) }
        ahead = ahead.map(reset)
      }
    }, Effect.scoped)

    return JobKind.make({
      kind: deliverKind,
      args: Schema.Struct({ subscription: uuid }),
      timeout: Duration.minutes(1),
      run: ({ subscription }, job) =>
        drain(subscription, job).pipe(
          // On its last attempt a drainer snoozes instead of failing: discarded, it would leave the
          // slot to a dead job and the pending deliveries waiting for the next round.
          Effect.catchCause((cause) => {
            const error = Cause.findErrorOption(cause)
            const ours = Option.isSome(error) && error.value instanceof JobKind.JobSnooze
            if (ours || Cause.hasInterrupts(cause) || job.attempt < job.maxAttempts) return Effect.failCause(cause)
            return Effect.logError(
              `webhooks: drainer of subscription ${subscription} failed on its last attempt; trying again in 10 minutes`,
              cause,
            ).pipe(Effect.andThen(Effect.fail(new JobKind.JobSnooze({ delay: lastAttemptSnooze }))))
          }),
        ),
    })
  })

export const make = makeWith()
