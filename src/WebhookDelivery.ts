/**
 * The drain job: sends one subscription's pending deliveries, one at a time in seq order, as long
 * as it holds the subscription's drain slot (`webhook_drains.job_id`).
 *
 *   acquire the slot ── held by another live job ──> done (that one sends what is pending)
 *   loop:
 *     no heads read ahead: put the 2xx answers so far on record and read up to `readAhead` heads
 *     (the lowest pending deliveries, with subscription, event, scope and, when `Permissions`
 *     answers in SQL, the owner's right) in ONE statement; other rights in one `allowedEach` call
 *       none ──> release the slot unless something is pending after all ──> done
 *     next head:
 *       subscription disabled meanwhile, or left over from before a re-enable ──> end them dead
 *       the event left the log ──> disable the subscription (`gap`)
 *       owner lacks `webhook_out.deliver` on the space, or the space left the scope
 *         ──> dead without any request; `last_delivered_seq` moves past it
 *     build the envelope; sign; POST (no transaction is open during the request); while the last
 *     head read is out, the record-and-read statement above runs alongside it
 *       2xx ──> kept for the next record; failing clock reset; next head
 *       410 ──> on record with the 2xx before it; disable (`gone`)
 *       else ──> on record with the 2xx before it; failing clock; disable (`failing`) after 5
 *                days, or snooze for the schedule's delay KEEPING the slot, so nothing behind it
 *                is sent meanwhile
 *     after a bound per run (deliveries or time) ──> record; snooze 0 keeping the slot (the job's
 *       timeout never fires in normal work; other subscriptions get the worker slots in turn)
 *
 * So a busy subscription waits for its requests, and for the database at most once every
 * `readAhead` deliveries; its deliveries cost about one statement per `readAhead` of them besides
 * the request. The price: a delivery's right and scope are read with its head, up to `readAhead`
 * deliveries before its request (`readAhead: 1` checks them during the previous request), and
 * 2xx answers reach the record up to `readAhead` requests later. Whatever ends a run (a failed
 * statement, a shutdown interrupting a request) records what it can first; a 2xx that missed the
 * record is sent again by the next run, with its stable `webhook-id`, before anything after it:
 * the record only ever misses a suffix of what was sent, so what is sent again comes in order.
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
 * - a drainer releases only inside a transaction (`webhook_drain_release`, one round trip) that
 *   first locks the row and then, in a statement started after the lock was granted (so its
 *   snapshot includes every round that held the lock before), finds nothing pending. A release
 *   that got the lock before the round's bump commits before the round reads the holder: the
 *   round sees the slot free and creates a job. A release that got the lock after it sees D and
 *   does not release: the drainer goes on to D.
 * - an acquirer takes the same lock (a plain UPDATE when the slot is free or its own, else a
 *   locking read followed by a fresh statement judging whether the holder lives). Either it gets
 *   the slot and its next take (a later statement) sees D, or a live holder has it and, by the
 *   previous point, that holder sees D before it can let go.
 * A holder that stays live keeps running again (snooze, retry, rescue) until it releases. The
 * test `WebhookDrainNoLostWakeup` races many short rounds against finishing drainers.
 *
 * So each endpoint receives its events in seq order, one at a time, and a revoked right or a
 * removed space never blocks the queue behind it.
 */
import { Cause, Clock, Duration, Effect, Metric, Option, type Redacted, Schema } from "effect"
import { SqlClient } from "effect/sql"
import * as JobKind from "./JobKind.ts"
import { NotificationStream } from "./NotificationStream.ts"
import { Permissions, webhookDeliver } from "./Permissions.ts"
import * as SecretBox from "./SecretBox.ts"
import { column } from "./SqlArrays.ts"
import { WebhookConfig } from "./WebhookConfig.ts"
import * as WebhookMetrics from "./WebhookMetrics.ts"
import * as WebhookSchedule from "./WebhookSchedule.ts"
import * as WebhookSender from "./WebhookSender.ts"
import * as WebhookSignature from "./WebhookSignature.ts"
import { disable } from "./WebhookSubscriptions.ts"
import { deliverKind, drainChannel } from "./WebhooksConsumer.ts"

/** Hard cap of a request body. */
export const maxBodyBytes = 64 * 1024

export interface DrainOptions {
  /** Deliveries one run handles before it snoozes 0 to let other jobs run. Default 500. */
  readonly maxDeliveriesPerRun?: number
  /** Time after which a run snoozes 0 before its next delivery. Default 5 s (the job timeout is 1 min). */
  readonly maxRunTime?: Duration.Input
  /**
   * Pending deliveries read at once, default 4: fewer statements per delivery, at the price of a
   * delivery's scope and right being read, and its 2xx recorded, up to this many deliveries away
   * from its request (see the header).
   */
  readonly readAhead?: number
  /**
   * How long a drainer that ran dry waits, keeping its slot, for a round to report new deliveries
   * (a NOTIFY on `WebhooksConsumer.drainChannel`) before it lets the slot go. Default 100 ms: a
   * busy subscription keeps one drainer instead of a job per round, at the price of a worker slot
   * held that long after the last delivery. 0: let go at once.
   */
  readonly linger?: Duration.Input
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
  /** The owner's right on the space, when `Permissions` answers in SQL. */
  readonly allowed: boolean | null
}

type Recorded = "delivered" | "pending" | "dead"

/** The subscription's failing clock (see `WebhookSchedule.afterFailure`). */
interface FailingClock {
  readonly firstAt: number | null
  readonly clockAt: number | null
}

const noFailures: FailingClock = { firstAt: null, clockAt: null }

/** A request that went out and what came back; on record once `record` has written it. */
interface Sent {
  readonly head: Head
  readonly started: number
  readonly answered: number
  readonly result: WebhookSender.SendResult
  readonly ok: boolean
}

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
    const linger = Duration.fromInputUnsafe(options.linger ?? Duration.millis(100))
    const lingers = Duration.isGreaterThan(linger, Duration.zero)

    // Drainers waiting for news of their subscription, woken by the round's NOTIFY (or by every
    // reconnect of the LISTEN connection, after which anything may have been missed).
    const waiting = new Map<string, Set<() => void>>()
    const stream = yield* NotificationStream
    yield* stream.subscribe(drainChannel, (wake) =>
      Effect.sync(() => {
        const woken = wake._tag === "Connected" ? [...waiting.values()] : [waiting.get(wake.payload) ?? new Set()]
        for (const set of woken) for (const w of set) w()
      }),
    )
    /**
     * News of the subscription for one run: `fresh()` tells whether a round reported deliveries (or
     * the LISTEN connection came back) since the last `clear()`, and `wait` returns at the next news
     * or after `linger`. Registered for the whole run, so no news between a read and a wait is lost.
     */
    const listen = (subscriptionId: string) =>
      Effect.gen(function* () {
        let news = true
        let wakeUp: (() => void) | undefined
        const onNews = () => {
          news = true
          wakeUp?.()
        }
        const set = waiting.get(subscriptionId) ?? new Set()
        waiting.set(subscriptionId, set)
        set.add(onNews)
        yield* Effect.addFinalizer(() =>
          Effect.sync(() => {
            set.delete(onNews)
            if (set.size === 0) waiting.delete(subscriptionId)
          }),
        )
        const next = Effect.callback<void>((resume) => {
          if (news) return resume(Effect.void)
          wakeUp = () => {
            wakeUp = undefined
            resume(Effect.void)
          }
          return Effect.sync(() => {
            wakeUp = undefined
          })
        })
        return {
          fresh: () => news,
          clear: () => {
            news = false
          },
          /** Something is pending after all (a release found it). */
          mark: onNews,
          wait: Effect.ignore(Effect.timeout(next, linger)),
        }
      })

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
     * after it (see the header and `webhook_drain_release`). `pending`: keep draining.
     */
    const release = (subscriptionId: string, job: bigint) =>
      sql<{ outcome: "released" | "pending" | "lost" }>`
        SELECT webhook_drain_release(${subscriptionId}::uuid, ${job}) AS outcome`.pipe(
        Effect.map((rows) => rows[0]?.outcome ?? "lost"),
      )

    /**
     * The owner's right on a head's space, when `Permissions` gives it as SQL; NULL otherwise, and
     * `allowedEach` answers after the read.
     */
    const allowedColumn =
      permissions.inSql === undefined
        ? sql.literal("NULL::boolean")
        : permissions.inSql({ principal: sql.literal("s.owner"), spaceId: sql.literal("e.space_id") }, webhookDeliver)

    /**
     * The head deliveries while this job holds the slot: up to `readAhead` pending ones after
     * `after`, in seq order; none when nothing is pending or the slot is lost.
     */
    const heads = (subscriptionId: string, job: bigint, after: bigint) => sql`
      SELECT d.id AS "deliveryId", d.event_seq AS "eventSeq", d.epoch, d.sequence, d.attempts,
             s.state, s.disabled_cause AS "disabledCause", s.started_seq AS "startedSeq", s.owner, s.url,
             s.secret_sealed AS "secretSealed", s.previous_secret_sealed AS "previousSecretSealed",
             s.previous_secret_until AS "previousSecretUntil",
             s.failing_first_at AS "failingFirstAt", s.failing_clock_at AS "failingClockAt",
             e.seq IS NOT NULL AS present, e.type, e.space_id AS space, e.occurred_at AS "occurredAt", e.payload,
             EXISTS (SELECT 1 FROM webhook_subscription_spaces AS ss
                     WHERE ss.subscription_id = s.id AND ss.space_id = e.space_id) AS scoped,
             ${allowedColumn} AS allowed
      FROM webhook_drains AS w
      JOIN webhook_subscriptions AS s ON s.id = w.subscription_id
      CROSS JOIN LATERAL (
        SELECT * FROM webhook_deliveries
        WHERE subscription_id = w.subscription_id AND state = 'pending' AND event_seq > ${after}
        ORDER BY event_seq LIMIT ${readAhead}
      ) AS d
      LEFT JOIN event_log AS e ON e.seq = d.event_seq
      WHERE w.subscription_id = ${subscriptionId}::uuid AND w.job_id = ${job}`

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
     * `WITH ...`: the attempts, the deliveries' new states and the subscription's progress and
     * failing clock. A delivery that is no longer pending (its subscription was disabled while the
     * requests ran) gets the attempt on record and nothing else.
     */
    const recording = (subscriptionId: string, sent: ReadonlyArray<Sent>, failing: FailingClock) => sql`
      WITH r AS (
        SELECT * FROM unnest(
          ${sent.map((s) => s.head.deliveryId.toString())}::bigint[], ${sent.map((s) => s.head.attempts + 1)}::int[],
          ${sent.map((s) => new Date(s.started))}::timestamptz[], ${sent.map((s) => s.result.durationMs)}::int[],
          ${column(sent, (s) => s.result.status)}::int[], ${column(sent, (s) => s.result.errorClass)}::text[],
          ${sent.map((s) => s.result.body.replaceAll("\u0000", "\uFFFD"))}::text[],
          ${sent.map((s) => s.result.truncated)}::bool[], ${sent.map((s) => s.ok)}::bool[]
        ) WITH ORDINALITY AS r(delivery_id, number, started_at, duration_ms, status, error_class, body, truncated, ok, n)
      ), attempt AS (
        INSERT INTO webhook_attempts
          (delivery_id, number, started_at, duration_ms, status, error_class, response_body, response_truncated)
        SELECT delivery_id, number, started_at, duration_ms, status, error_class, body, truncated FROM r
      ), d AS (
        UPDATE webhook_deliveries AS d
        SET attempts = d.attempts + 1, last_status = r.status, last_error_class = r.error_class,
            last_attempt_at = r.started_at,
            state = CASE WHEN r.ok AND d.state = 'pending' THEN 'delivered' ELSE d.state END,
            finished_at = CASE WHEN r.ok AND d.state = 'pending' THEN clock_timestamp() ELSE d.finished_at END
        FROM r WHERE d.id = r.delivery_id
        RETURNING d.id, d.state, d.event_seq
      ), s AS (
        UPDATE webhook_subscriptions
        SET last_delivered_seq = greatest(last_delivered_seq, (SELECT max(event_seq) FROM d WHERE state = 'delivered')),
            failing_first_at = ${failing.firstAt === null ? null : new Date(failing.firstAt)},
            failing_clock_at = ${failing.clockAt === null ? null : new Date(failing.clockAt)}
        WHERE id = ${subscriptionId}::uuid AND EXISTS (SELECT 1 FROM d WHERE state IN ('delivered', 'pending'))
        RETURNING id
      )`

    /** Puts `sent` on record; their states come back in the same order. */
    const record = (subscriptionId: string, sent: ReadonlyArray<Sent>, failing: FailingClock) =>
      sql<{ state: Recorded }>`
        ${recording(subscriptionId, sent, failing)}
        SELECT d.state FROM r JOIN d ON d.id = r.delivery_id ORDER BY r.n`.pipe(
        Effect.map((rows) => sent.map((_, i) => rows[i]?.state ?? "dead")),
        Effect.withSpan("WebhookDelivery.record", { attributes: { "webhook.deliveries": sent.length } }),
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

    /** A head with the owner's right on its space, checked when it was read. */
    interface Checked {
      readonly head: Head
      readonly allowed: boolean
    }

    /**
     * Puts the 2xx `sent` on record and reads the next heads after `after`, in one statement (its
     * read sees the log as before its own record, hence `after`, at least the last seq sent). Rights
     * that `Permissions` did not answer in that statement are asked in one call.
     */
    const exchange = (subscriptionId: string, job: bigint, sent: ReadonlyArray<Sent>, after: bigint) =>
      Effect.gen(function* () {
        const rows = yield* (
          sent.length === 0
            ? sql<Head>`${heads(subscriptionId, job, after)}`
            : sql<Head>`${recording(subscriptionId, sent, noFailures)} ${heads(subscriptionId, job, after)}`
        ).pipe(Effect.withSpan("WebhookDelivery.exchange", { attributes: { "webhook.deliveries": sent.length } }))
        const unanswered = rows.filter((h) => h.allowed === null && sendable(h))
        const answers =
          unanswered.length === 0
            ? []
            : yield* permissions.allowedEach(
                unanswered.map((h) => ({ principal: h.owner, action: webhookDeliver, spaceId: h.space! })),
              )
        const answered = new Map(unanswered.map((h, i) => [h, answers[i] === true]))
        return rows.map((head): Checked => ({ head, allowed: head.allowed ?? answered.get(head) ?? false }))
      })

    /** Signs and POSTs a sendable, permitted head; nothing goes on record here. */
    const send = (run: Run, subscriptionId: string, h: Head) =>
      Effect.gen(function* () {
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
        const answered = yield* Clock.currentTimeMillis
        const ok = result.status !== undefined && result.status >= 200 && result.status < 300
        return { head: h, started, answered, result, ok } satisfies Sent
      }).pipe(
        Effect.withSpan("WebhookDelivery.attempt", {
          attributes: { "webhook.subscription": subscriptionId, "webhook.event_seq": String(h.eventSeq) },
        }),
      )

    const headAge = (subscriptionId: string, seconds: number) =>
      Metric.update(Metric.withAttributes(WebhookMetrics.headAge, { subscription: subscriptionId }), seconds)

    /**
     * A failed request (the last of `batch`), on record with the 2xx sends before it. `settled`: the delivery is no
     * longer pending or the subscription got disabled; `snooze`: retry after the delay, keeping
     * the slot.
     */
    const failed = (subscriptionId: string, batch: ReadonlyArray<Sent>, clockBefore: FailingClock) =>
      Effect.gen(function* () {
        const sent = batch.at(-1)!
        const { head: h, result } = sent
        yield* headAge(subscriptionId, Math.max(0, (sent.answered - h.occurredAt!.getTime()) / 1000))
        if (result.status === 410) {
          const states = yield* record(subscriptionId, batch, clockBefore)
          if (states.at(-1) === "pending") {
            yield* disable([subscriptionId], "gone").pipe(provide)
            yield* attemptsBy("gone")
          }
          return { _tag: "settled" } as const
        }
        const clock = WebhookSchedule.afterFailure(clockBefore, sent.answered)
        const states = yield* record(subscriptionId, batch, clock)
        if (states.at(-1) !== "pending") return { _tag: "settled" } as const
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
            now: sent.answered,
          },
          Math.random,
          config.retrySteps,
        )
        return { _tag: "snooze", delay } as const
      })

    const drain = Effect.fn("WebhookDelivery.drain")(function* (subscriptionId: string, job: JobKind.JobInfo) {
      if (!(yield* acquire(subscriptionId, job.id))) return
      const start = yield* Clock.currentTimeMillis
      // Closed when the run ends: no connection outlives the run whose sends checked it.
      const run: Run = { connections: yield* WebhookSender.connections(config.policy), secrets: new Map() }
      /** Read and checked, not sent yet, in seq order. */
      let queue: Array<Checked> = []
      /** Answered 2xx, not on record yet, in seq order. */
      let unrecorded: Array<Sent> = []
      /** The seq of the last head this run sent or settled: every pending delivery before it is on record. */
      let after = -1n
      /** A 2xx in this run has reset the failing clock the heads were read with. */
      let succeeded = false
      const news = yield* listen(subscriptionId)

      /**
       * Runs `f` on the 2xx answers not on record yet; should it fail, they stay unrecorded ahead
       * of any later ones, so the record never skips over them.
       */
      const withUnrecorded = <A, E, R>(f: (sent: ReadonlyArray<Sent>) => Effect.Effect<A, E, R>) =>
        Effect.suspend(() => {
          const sent = unrecorded
          unrecorded = []
          return f(sent).pipe(
            Effect.onError(() =>
              Effect.sync(() => {
                unrecorded = [...sent, ...unrecorded]
              }),
            ),
          )
        })
      const flush = withUnrecorded((sent) =>
        sent.length === 0 ? Effect.void : Effect.asVoid(record(subscriptionId, sent, noFailures)),
      )
      // The news flag is cleared before the statement: a round that commits while it runs sets it
      // again, and the drainer reads once more.
      const recordAndRead = (after: bigint) =>
        Effect.suspend(() => {
          news.clear()
          return withUnrecorded((sent) => exchange(subscriptionId, job.id, sent, after))
        })

      // Whatever ends the run (a failed statement, a shutdown interrupting a request), the 2xx
      // answers already received go on record if the database takes them; those it does not take
      // are sent again, in order, by the next run.
      return yield* Effect.gen(function* () {
        for (let n = 0; ; n++) {
          if (n >= maxDeliveries || (yield* Clock.currentTimeMillis) - start >= maxRunMillis) {
            yield* flush
            return yield* new JobKind.JobSnooze({ delay: Duration.zero })
          }
          if (queue.length === 0) {
            // Nothing read ahead. Without news since the last read, nothing new is pending: wait
            // for a round's (keeping the slot) and read only then, recording the answers so far with
            // it; after `linger` without news, read once more and let go if still nothing.
            const quiet = lingers && !news.fresh()
            if (quiet) yield* news.wait
            const lastChance = quiet && !news.fresh()
            queue = yield* recordAndRead(after)
            if (queue.length === 0 && lingers && !lastChance) continue
            if (queue.length === 0) {
              if ((yield* release(subscriptionId, job.id)) !== "pending") return
              news.mark()
              continue
            }
          }
          const { head: h, allowed } = queue.shift()!
          after = h.eventSeq
          if (!sendable(h) || !allowed) {
            yield* flush
            if (sendable(h)) yield* suppress(subscriptionId, h, "permission")
            else {
              queue = []
              yield* settle(subscriptionId, h)
            }
            continue
          }
          // While the last head read is out, and a round has reported more since, the 2xx before it
          // go on record and the next heads are read (with their rights) in one statement: a busy
          // subscription waits for its requests, and for the database at most once every
          // `readAhead` deliveries; a caught-up one costs one statement per delivery.
          const readAlong = queue.length === 0 && (!lingers || news.fresh())
          const [sent, fresh] = yield* Effect.all(
            [send(run, subscriptionId, h), readAlong ? recordAndRead(h.eventSeq) : Effect.undefined],
            { concurrency: 2 },
          )
          if (sent.ok) {
            succeeded = true
            unrecorded.push(sent)
            yield* attemptsBy("delivered")
            yield* Metric.update(WebhookMetrics.latency, sent.answered - h.occurredAt!.getTime())
            yield* headAge(subscriptionId, 0)
            if (fresh !== undefined) queue = fresh
            continue
          }
          const clockBefore = succeeded
            ? noFailures
            : { firstAt: h.failingFirstAt?.getTime() ?? null, clockAt: h.failingClockAt?.getTime() ?? null }
          queue = []
          unrecorded.push(sent)
          const outcome = yield* withUnrecorded((all) => failed(subscriptionId, all, clockBefore))
          if (outcome._tag === "snooze") return yield* new JobKind.JobSnooze({ delay: outcome.delay })
        }
      }).pipe(Effect.ensuring(Effect.ignore(flush)))
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
