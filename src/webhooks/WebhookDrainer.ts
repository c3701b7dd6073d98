/**
 * The drain job: sends one subscription's pending deliveries, one at a time in seq order, as long
 * as it holds the subscription's drain slot (`webhook_drains.job_id`).
 *
 *   acquire the slot (learning the owner) ── held by another live job ──> done (that one sends)
 *   the owner has `maxInFlightPerOwner` runs in flight in this worker ──> snooze 0.25-1 s keeping
 *     the slot: the job slot goes to someone else's deliveries meanwhile
 *   loop:
 *     no heads read ahead: unless the last read came back full or a round reported news, wait up
 *     to `linger` for news (keeping the slot); then put the 2xx answers so far on record and read
 *     up to `size` heads (the lowest pending deliveries, with subscription, event, scope and, when
 *     `Permissions` answers in SQL, the owner's right) in ONE statement, which also numbers the
 *     heads it finds sendable (`WebhookNumbering`); other rights in one `allowedEach` call, their
 *     numbers in one more statement
 *       none ──> after a linger without news: release the slot unless something is pending after
 *                all ──> done
 *     next head:
 *       its right and scope were read more than `permissionMaxAge` ago, with a request since
 *         ──> give back the numbers of the heads read ahead; read again
 *       subscription disabled meanwhile, or left over from before a re-enable ──> end them dead
 *       the event left the log ──> disable the subscription (`gap`)
 *       owner lacks `webhook_out.deliver` on the space, or the space left the scope
 *         ──> dead without any request and without a number; `last_delivered_seq` moves past it
 *       no number (another run renumbered meanwhile) ──> read again
 *     build the envelope; sign; POST (no transaction is open during the request); while the last
 *     head read is out, the record-and-read statement above runs alongside it, if the last read
 *     was full or a round reported news, and the endpoint answers fast enough for what it reads to
 *     be fresh when its turn comes
 *       2xx ──> kept for the next record; failing clock reset; next head
 *       410 ──> on record with the 2xx before it; disable (`gone`)
 *       else ──> numbers read ahead given back; on record with the 2xx before it; failing clock;
 *                disable (`failing`) after 5 days, or snooze for the schedule's delay KEEPING the
 *                slot, so nothing behind it is sent meanwhile
 *     after a bound per run (deliveries or time) ──> record; give back; snooze 0 keeping the slot
 *       (the job's timeout never fires in normal work; other subscriptions get the worker slots in
 *       turn)
 *
 * So a busy subscription waits for its requests, and for the database about once per read: the
 * read-ahead starts at `readAhead`, doubles while reads come back full (up to `maxReadAhead`), is
 * kept to what the endpoint's last answer time lets go out within half of `permissionMaxAge`, and
 * falls back to `readAhead` after a read that was not full. A backlog drains at the speed of its
 * endpoint; a caught-up subscription costs one statement per delivery. The price: a delivery's
 * right and scope are read with its head, up to `permissionMaxAge` before its request (never
 * more: then they are read again first), and 2xx answers reach the record up to one read later.
 * Whatever ends a run (a failed statement, a shutdown interrupting a request) records what it can
 * first; a 2xx that missed the record is sent again by the next run, with its stable `webhook-id`,
 * before anything after it: the record only ever misses a suffix of what was sent, so what is sent
 * again comes in order.
 *
 * A delivery takes its `sequence` when it is first sent and keeps it (see WebhookNumbering.ts for
 * why numbers a run gives back cannot have gone out). The one edge: a head numbered by an earlier
 * run that stopped without giving it back (a crash) keeps its number even when it turns out
 * suppressed now, since that request may have gone out; the receiver sees a gap there.
 *
 * A run whose job id holds the slot continues where it stopped (after a snooze, a retry, or a
 * rescue after a crash, the same job id runs again). A slot whose job no longer exists or is
 * completed, cancelled or discarded is free. A drainer never fails for good: on its last attempt
 * a failure becomes a long snooze instead of a discard, so a slot is not left to a dead job.
 *
 * A run waiting on its endpoint holds a slot of the `webhooks` queue but no database connection,
 * so a worker runs hundreds of them (`webhook.max_in_flight`); the per-owner cap keeps one owner's
 * slow endpoints from taking them all.
 *
 * No lost wake-up. Claim: once a pending delivery D is committed, either a live drainer will take
 * it or a job exists that will acquire the slot and take it. All parties meet on the slot's row
 * lock:
 * - the round that creates D upserts the subscription's drain row, so it holds the row lock until
 *   D commits, and reads the holder under it. If a live job holds the slot the round creates no
 *   job (`WebhookFanOut.skipHeld`); otherwise it creates one, committed with D.
 * - a drainer releases only inside a transaction (`webhook_drain_release`, one round trip) that
 *   first locks the row and then, in a statement started after the lock was granted (so its
 *   snapshot includes every round that held the lock before), finds nothing pending. A release
 *   that got the lock before the round's upsert commits before the round reads the holder: the
 *   round sees the slot free and creates a job. A release that got the lock after it sees D and
 *   does not release: the drainer goes on to D.
 * - an acquirer takes the same lock (a plain UPDATE when the slot is free or its own, else a
 *   locking read followed by a fresh statement judging whether the holder lives). Either it gets
 *   the slot and its next take (a later statement) sees D, or a live holder has it and, by the
 *   previous point, that holder sees D before it can let go.
 * A holder that stays live keeps running again (snooze, retry, rescue) until it releases. The
 * test `WebhookDrainNoLostWakeup` races many short rounds against finishing drainers. Numbering
 * does not enter this: drainers number on the subscription and delivery rows, never on the drain
 * row.
 *
 * So each endpoint receives its events in seq order, one at a time, and a revoked right or a
 * removed space never blocks the queue behind it.
 */
import { Cause, Clock, Duration, Effect, Metric, Option, type Redacted, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { Permissions, webhookDeliver } from "../authz/Permissions.ts"
import * as SecretBox from "../crypto/SecretBox.ts"
import * as JobKind from "../jobs/JobKind.ts"
import * as Jobs from "../jobs/Jobs.ts"
import * as OutboundSender from "../outbound/OutboundSender.ts"
import { NotificationStream } from "../platform/NotificationStream.ts"
import { column } from "../platform/SqlArrays.ts"
import * as ThrottledWarnings from "../platform/ThrottledWarnings.ts"
import { disable } from "./SubscriptionStates.ts"
import { deliveryDefaults, WebhookConfig } from "./WebhookConfig.ts"
import { deliverKind, drainChannel } from "./WebhookFanOut.ts"
import * as WebhookInFlight from "./WebhookInFlight.ts"
import * as WebhookMetrics from "./WebhookMetrics.ts"
import * as WebhookNumbering from "./WebhookNumbering.ts"
import * as WebhookSchedule from "./WebhookSchedule.ts"
import * as WebhookSignature from "./WebhookSignature.ts"

/** Hard cap of a request body. */
export const maxBodyBytes = 64 * 1024

export interface DrainOptions {
  /** Deliveries one run handles before it snoozes 0 to let other jobs run. Default 500. */
  readonly maxDeliveriesPerRun?: number
  /** Time after which a run snoozes 0 before its next delivery. Default 5 s (the job timeout is 1 min). */
  readonly maxRunTime?: Duration.Input
  /**
   * Pending deliveries a run reads at once at first, and again after a read that was not full.
   * Default 4. While reads come back full it doubles, up to `maxReadAhead` (see the header).
   */
  readonly readAhead?: number
  /** The most deliveries one read takes, default 64: the 2xx answers of up to this many wait for one record. */
  readonly maxReadAhead?: number
  /**
   * How long a drainer that ran dry waits, keeping its slot, for a round to report new deliveries
   * (a NOTIFY on `WebhookFanOut.drainChannel`) before it lets the slot go. Default 100 ms: a
   * busy subscription keeps one drainer instead of a job per round, at the price of a worker slot
   * held that long after the last delivery. 0: let go at once.
   */
  readonly linger?: Duration.Input
  /**
   * A delivery whose right and scope were read longer than this before its request is checked
   * again first. Default `WebhookConfig`'s `permissionMaxAge` (`webhook.permission_max_age`, 1 s).
   */
  readonly permissionMaxAge?: Duration.Input
  /**
   * Runs of one owner's subscriptions in flight at once in this worker; another one snoozes
   * briefly, keeping its drain slot. Default `WebhookConfig`'s `maxInFlightPerOwner` (32).
   */
  readonly maxInFlightPerOwner?: number
  /**
   * Observes each statement that put outcomes of the subscription's deliveries on record (answers,
   * deliveries that went dead without a request, a disable): tests wait on it instead of polling.
   */
  readonly onRecorded?: (subscriptionId: string) => Effect.Effect<void>
}

/** How long a drainer waits after an infrastructure failure on its last job attempt. */
const lastAttemptSnooze = Duration.minutes(10)

const uuid = Schema.String.check(Schema.isPattern(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i))

/** The head delivery of a subscription, with everything needed to send it. */
interface Head {
  readonly deliveryId: bigint
  readonly eventSeq: bigint
  readonly epoch: number
  /** The number it goes out with; null when it is not to be sent, or another run renumbered meanwhile. */
  readonly sequence: bigint | null
  /** The number it had before this read (from an earlier one, whose request may have gone out). */
  readonly existing: bigint | null
  /** This run gave it its number, so it may give it back. */
  readonly numberedHere: boolean
  /** `numbered_by` as the read saw it. */
  readonly tokenSeen: string | null
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
  /** Whether it can be sent as far as the row says (active, not a leftover, event present, in scope). */
  readonly sendable: boolean
  /** The owner's right on the space, when `Permissions` answers in SQL. */
  readonly allowed: boolean | null
}

/** A head with the owner's right on its space, checked when it was read. */
interface Checked {
  readonly head: Head
  readonly allowed: boolean
  /** When the statement that read its right and scope started (by the run's `Clock`). */
  readonly checkedAt: number
  /** The first head of a read the run waited for: nothing happened since, however long the read took. */
  readonly exempt: boolean
  /** The token its read's numbering set, if that statement gave it its number. */
  readonly numberedBy: string | undefined
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
  readonly result: OutboundSender.SendResult
  readonly ok: boolean
}

/** What one run keeps between its steps. */
interface Run {
  readonly subscriptionId: string
  readonly job: bigint
  /** Keep-alive connections and opened secrets, shared by the run's requests. */
  readonly connections: OutboundSender.Connections
  readonly secrets: Map<string, Redacted.Redacted<string>>
  /** Read and checked, not sent yet, in seq order. */
  queue: Array<Checked>
  /** Read along with the request in flight; the queue once that request is answered. */
  incoming: Array<Checked>
  /** Answered 2xx, not on record yet, in seq order. */
  unrecorded: Array<Sent>
  /** The seq of the last head this run sent or settled: every pending delivery before it is on record. */
  after: bigint
  /** A 2xx in this run has reset the failing clock the heads were read with. */
  succeeded: boolean
  /** The last read came back full: more may be pending, so read again at once. */
  full: boolean
  /** Heads the next read asks for. */
  size: number
  /** The token of the run's last numbering, while the subscription may still hold it. */
  token: string | undefined
  /** How long the last request took: what the next heads read ahead must wait for, each. */
  lastRequestMillis: number | undefined
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
    const maxReadAhead = Math.max(readAhead, options.maxReadAhead ?? 64)
    const linger = Duration.fromInputUnsafe(options.linger ?? Duration.millis(100))
    const lingers = Duration.isGreaterThan(linger, Duration.zero)
    const maxAgeMillis = Duration.toMillis(
      Duration.fromInputUnsafe(
        options.permissionMaxAge ?? config.permissionMaxAge ?? deliveryDefaults.permissionMaxAge,
      ),
    )
    const inFlight = WebhookInFlight.make(
      options.maxInFlightPerOwner ?? config.maxInFlightPerOwner ?? deliveryDefaults.maxInFlightPerOwner,
    )
    const recorded = options.onRecorded ?? (() => Effect.void)
    const warn = ThrottledWarnings.make(Duration.minutes(1))

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
          /** Something is pending after all (a release found it, or heads read were put back). */
          mark: onNews,
          wait: Effect.ignore(Effect.timeout(next, linger)),
        }
      })
    type News = Effect.Success<ReturnType<typeof listen>>

    /**
     * Takes the slot when it is free or already this job's, and returns the subscription's owner;
     * `undefined` when another live job holds it (or the subscription is gone).
     */
    const acquire = (subscriptionId: string, job: bigint) =>
      Effect.gen(function* () {
        const [taken] = yield* sql<{ owner: string }>`
          UPDATE webhook_drains AS w SET job_id = ${job}
          FROM webhook_subscriptions AS s
          WHERE w.subscription_id = ${subscriptionId}::uuid AND s.id = w.subscription_id
            AND (w.job_id IS NULL OR w.job_id = ${job})
          RETURNING s.owner`
        if (taken !== undefined) return taken.owner
        // Held by another job: under the row lock, a statement started after it judges the holder.
        return yield* sql.withTransaction(
          Effect.gen(function* () {
            const [row] = yield* sql<{ jobId: bigint | null; owner: string }>`
              SELECT w.job_id AS "jobId", s.owner
              FROM webhook_drains AS w JOIN webhook_subscriptions AS s ON s.id = w.subscription_id
              WHERE w.subscription_id = ${subscriptionId}::uuid FOR UPDATE OF w`
            if (row === undefined) return undefined
            if (row.jobId !== null && row.jobId !== job) {
              const [holder] = yield* sql<{ live: boolean }>`SELECT ${Jobs.isLive(sql, row.jobId)} AS live`
              if (holder?.live === true) return undefined
            }
            yield* sql`UPDATE webhook_drains SET job_id = ${job} WHERE subscription_id = ${subscriptionId}::uuid`
            return row.owner
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
     * `h` (the head deliveries while this job holds the slot: up to `limit` pending ones after
     * `after`, in seq order; none when nothing is pending or the slot is lost) and `g` (which of
     * them are to be sent as far as this statement can tell: `go`).
     */
    const headsCtes = (subscriptionId: string, job: bigint, after: bigint, limit: number) => sql`
      h AS MATERIALIZED (
        SELECT d.id AS "deliveryId", d.event_seq AS "eventSeq", d.epoch, d.sequence AS existing, d.attempts,
               s.state, s.disabled_cause AS "disabledCause", s.started_seq AS "startedSeq", s.owner, s.url,
               s.secret_sealed AS "secretSealed", s.previous_secret_sealed AS "previousSecretSealed",
               s.previous_secret_until AS "previousSecretUntil",
               s.failing_first_at AS "failingFirstAt", s.failing_clock_at AS "failingClockAt",
               s.numbered_by AS "tokenSeen",
               e.seq IS NOT NULL AS present, e.type, e.space_id AS space, e.occurred_at AS "occurredAt", e.payload,
               EXISTS (SELECT 1 FROM webhook_subscription_spaces AS ss
                       WHERE ss.subscription_id = s.id AND ss.space_id = e.space_id) AS scoped,
               ${allowedColumn} AS allowed
        FROM webhook_drains AS w
        JOIN webhook_subscriptions AS s ON s.id = w.subscription_id
        CROSS JOIN LATERAL (
          SELECT * FROM webhook_deliveries
          WHERE subscription_id = w.subscription_id AND state = 'pending' AND event_seq > ${after}
          ORDER BY event_seq LIMIT ${limit}
        ) AS d
        LEFT JOIN event_log AS e ON e.seq = d.event_seq
        WHERE w.subscription_id = ${subscriptionId}::uuid AND w.job_id = ${job}
      ), g AS (
        SELECT "deliveryId", "eventSeq", existing, sendable, sendable AND coalesce(allowed, false) AS go
        FROM (SELECT *, (state = 'active' AND "eventSeq" > "startedSeq" AND present AND scoped) AS sendable FROM h) AS x
      )`

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
        yield* recorded(subscriptionId)
        yield* Metric.update(WebhookMetrics.suppressed, 1)
        yield* attemptsBy("suppressed")
      })

    /**
     * `r`, `attempt`, `d`: the attempts of `sent` and the deliveries' new states. A delivery that
     * is no longer pending (its subscription was disabled while the requests ran) gets the attempt
     * on record and nothing else.
     */
    const attemptsCtes = (sent: ReadonlyArray<Sent>) => sql`
      r AS (
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
      )`

    /** `p`'s columns about the attempts in `d`: whether the subscription's progress moves, and how far. */
    const progressOf = (sent: ReadonlyArray<Sent>) =>
      sent.length === 0
        ? sql`false AS recorded, NULL::bigint AS delivered_to`
        : sql`EXISTS (SELECT 1 FROM d WHERE state IN ('delivered', 'pending')) AS recorded,
              (SELECT max(event_seq) FROM d WHERE state = 'delivered') AS delivered_to`

    /**
     * `s AS (...)`: the statement's one UPDATE of the subscription row, after `p`: its progress and
     * failing clock when `p.recorded`, its numbering (`WebhookNumbering.bump`) when `p.numbering`.
     */
    const subscriptionCte = (subscriptionId: string, failing: FailingClock, token: string | null) => sql`
      s AS (
        UPDATE webhook_subscriptions AS s
        SET last_delivered_seq = CASE WHEN p.recorded THEN greatest(s.last_delivered_seq, p.delivered_to)
                                      ELSE s.last_delivered_seq END,
            failing_first_at = CASE WHEN p.recorded
                                    THEN ${failing.firstAt === null ? null : new Date(failing.firstAt)}::timestamptz
                                    ELSE s.failing_first_at END,
            failing_clock_at = CASE WHEN p.recorded
                                    THEN ${failing.clockAt === null ? null : new Date(failing.clockAt)}::timestamptz
                                    ELSE s.failing_clock_at END,
            ${WebhookNumbering.bump(sql, token)}
        FROM p
        WHERE s.id = ${subscriptionId}::uuid AND (p.recorded OR p.numbering)
        RETURNING s.last_sequence, ${WebhookNumbering.held(sql, token)}
      )`

    /** Puts `sent` on record; their states come back in the same order. */
    const record = (subscriptionId: string, sent: ReadonlyArray<Sent>, failing: FailingClock) =>
      sql<{ state: Recorded }>`
        WITH ${attemptsCtes(sent)}, p AS (
          SELECT ${progressOf(sent)}, false AS numbering, 0 AS fresh, NULL::uuid AS token_seen
        ), ${subscriptionCte(subscriptionId, failing, null)}
        SELECT d.state FROM r JOIN d ON d.id = r.delivery_id ORDER BY r.n`.pipe(
        Effect.map((rows) => sent.map((_, i) => rows[i]?.state ?? "dead")),
        Effect.tap(() => recorded(subscriptionId)),
        Effect.withSpan("WebhookDrainer.record", { attributes: { "webhook.deliveries": sent.length } }),
      )

    /**
     * Puts the 2xx `sent` on record, reads the next heads after `after` and numbers those it finds
     * sendable and allowed, in one statement (its read sees the log as before its own record,
     * hence `after`, at least the last seq sent). `token` (none when rights are asked afterwards):
     * what `numbered_by` becomes if its numbers hold.
     */
    const recordAndReadStatement = (
      run: Run,
      sent: ReadonlyArray<Sent>,
      after: bigint,
      limit: number,
      token: string | null,
    ) => sql<Head & { readonly numbered: boolean }>`
      WITH ${sent.length === 0 ? sql`` : sql`${attemptsCtes(sent)},`}
      ${headsCtes(run.subscriptionId, run.job, after, limit)}, p AS (
        SELECT ${progressOf(sent)}, ${token === null ? sql`false` : sql`coalesce(bool_or(go), false)`} AS numbering,
               (count(*) FILTER (WHERE go AND existing IS NULL))::int AS fresh,
               (SELECT "tokenSeen" FROM h LIMIT 1) AS token_seen
        FROM g
      ), ${subscriptionCte(run.subscriptionId, noFailures, token)}, f AS (
        SELECT "deliveryId" AS delivery_id, row_number() OVER (ORDER BY "eventSeq") AS rank
        FROM g WHERE go AND existing IS NULL
      ), ${WebhookNumbering.numbered(sql)}
      SELECT h.*, g.sendable,
             CASE WHEN g.go AND coalesce((SELECT numbered FROM s), false) THEN coalesce(n.sequence, h.existing) END
               AS sequence,
             n.id IS NOT NULL AS "numberedHere", coalesce((SELECT numbered FROM s), false) AS numbered
      FROM h JOIN g USING ("deliveryId") LEFT JOIN n ON n.id = h."deliveryId"
      ORDER BY h."eventSeq"`

    /** How many heads the next read asks for, after one that asked `asked` and got `got`. */
    const nextSize = (run: Run, asked: number, got: number) => {
      const grown = got < asked ? readAhead : Math.min(maxReadAhead, asked * 2)
      const last = run.lastRequestMillis
      // What can go out within half the age bound at the endpoint's last pace: the rest would be
      // read again anyway.
      return last === undefined
        ? grown
        : Math.min(grown, Math.max(1, Math.floor(maxAgeMillis / (2 * Math.max(1, last)))))
    }

    /**
     * Puts the 2xx `sent` on record and reads (and numbers) the next heads after `after`; rights
     * that `Permissions` did not answer in that statement are asked in one call, and those heads
     * numbered in one more statement. `waited`: the run waits for this read before anything else.
     */
    const exchange = (run: Run, sent: ReadonlyArray<Sent>, after: bigint, waited: boolean) =>
      Effect.gen(function* () {
        const checkedAt = yield* Clock.currentTimeMillis
        const asked = run.size
        const inStatement = permissions.inSql !== undefined
        const token = WebhookNumbering.newToken()
        const rows = yield* recordAndReadStatement(run, sent, after, asked, inStatement ? token : null).pipe(
          Effect.withSpan("WebhookDrainer.exchange", { attributes: { "webhook.deliveries": sent.length } }),
        )
        if (sent.length > 0) yield* recorded(run.subscriptionId)
        run.full = rows.length === asked
        run.size = nextSize(run, asked, rows.length)
        let heads: ReadonlyArray<Head> = rows
        let allowed: (h: Head) => boolean = (h) => h.allowed === true
        let numbered = rows[0]?.numbered === true
        if (!inStatement) {
          const sendable = rows.filter((h) => h.sendable)
          const answers =
            sendable.length === 0
              ? []
              : yield* permissions.allowedEach(
                  sendable.map((h) => ({ principal: h.owner, action: webhookDeliver, spaceId: h.space! })),
                )
          const go = new Set<Head>(sendable.filter((_, i) => answers[i] === true))
          allowed = (h) => go.has(h)
          const first = rows.find((h) => go.has(h))
          if (first !== undefined) {
            const numbers = yield* WebhookNumbering.number(
              run.subscriptionId,
              [...go].map((h) => ({ deliveryId: h.deliveryId, existing: h.existing })),
              first.tokenSeen,
              token,
            ).pipe(provide)
            const byId = new Map(numbers.map((n) => [n.deliveryId, n]))
            heads = rows.map((h) => {
              const n = byId.get(h.deliveryId)
              return n === undefined ? h : { ...h, sequence: n.sequence, numberedHere: n.numberedHere }
            })
            numbered = numbers.some((n) => n.sequence !== null)
          }
        }
        if (numbered) run.token = token
        return heads.map(
          (head, i): Checked => ({
            head,
            allowed: allowed(rows[i]!),
            checkedAt,
            exempt: waited && i === 0,
            numberedBy: numbered && head.numberedHere ? token : undefined,
          }),
        )
      })

    /**
     * Gives back the numbers this run handed to the heads it read and will not send now (the
     * queue, and what was read along), which are read again before they go.
     */
    const discard = (run: Run) =>
      Effect.suspend(() => {
        const heads = [...run.queue, ...run.incoming]
        run.queue = []
        run.incoming = []
        // Only what the run's last numbering handed out: earlier numbers were sent, or read by
        // whoever changed the token since.
        const numbers = heads.flatMap((c) =>
          c.numberedBy !== undefined && c.numberedBy === run.token && c.head.sequence !== null ? [c.head.sequence] : [],
        )
        return WebhookNumbering.giveBack(run.subscriptionId, run.token, numbers).pipe(
          provide,
          Effect.tap((token) =>
            Effect.sync(() => {
              run.token = token
            }),
          ),
          // Whether it went through is unknown: give back nothing numbered so far.
          Effect.onError(() =>
            Effect.sync(() => {
              run.token = undefined
            }),
          ),
          Effect.asVoid,
        )
      })

    /**
     * Runs `f` on the 2xx answers not on record yet; should it fail, they stay unrecorded ahead of
     * any later ones, so the record never skips over them.
     */
    const withUnrecorded = <A, E, R>(run: Run, f: (sent: ReadonlyArray<Sent>) => Effect.Effect<A, E, R>) =>
      Effect.suspend(() => {
        const sent = run.unrecorded
        run.unrecorded = []
        return f(sent).pipe(
          Effect.onError(() =>
            Effect.sync(() => {
              run.unrecorded = [...sent, ...run.unrecorded]
            }),
          ),
        )
      })

    const recordAnswers = (run: Run) =>
      withUnrecorded(run, (sent) =>
        sent.length === 0 ? Effect.void : Effect.asVoid(record(run.subscriptionId, sent, noFailures)),
      )

    /** Before a run ends: the answers on record, the numbers of what it read and did not send given back. */
    const flush = (run: Run) => Effect.andThen(recordAnswers(run), discard(run))

    // The news flag is cleared before the statement: a round that commits while it runs sets it
    // again, and the drainer reads once more.
    const recordAndRead = (run: Run, news: News, after: bigint, waited: boolean) =>
      Effect.suspend(() => {
        news.clear()
        return withUnrecorded(run, (sent) => exchange(run, sent, after, waited))
      })

    const openSecret = (run: Run, sealed: string) =>
      Effect.gen(function* () {
        const known = run.secrets.get(sealed)
        if (known !== undefined) return known
        const opened = yield* SecretBox.open(config.secretKey, sealed).pipe(
          Effect.tapError((e) =>
            warn(run.subscriptionId, `webhooks: subscription ${run.subscriptionId}: ${e.message}; nothing is sent`),
          ),
        )
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

    /** Settles a head that is not to be sent: leftovers, the event gone, the scope left. */
    const settle = (run: Run, h: Head) =>
      Effect.gen(function* () {
        const subscriptionId = run.subscriptionId
        if (h.state !== "active" || h.eventSeq <= h.startedSeq) {
          yield* discard(run)
          yield* endLeftovers(subscriptionId, h)
          return yield* recorded(subscriptionId)
        }
        if (!h.present) {
          yield* discard(run)
          yield* disable([subscriptionId], "gap").pipe(provide)
          yield* recorded(subscriptionId)
          return yield* Effect.logError(
            `webhooks: the event of subscription ${subscriptionId}'s next delivery left the log; disabled with cause gap`,
          )
        }
        yield* suppress(subscriptionId, h, "scope")
      })

    /** Signs and POSTs a sendable, permitted, numbered head; nothing goes on record here. */
    const send = (run: Run, h: Head, sequence: bigint) =>
      Effect.gen(function* () {
        const body = JSON.stringify({
          version: 1,
          type: h.type,
          timestamp: h.occurredAt!.toISOString(),
          sequence: Number(sequence),
          space: h.space,
          data: h.payload,
        })
        const started = yield* Clock.currentTimeMillis
        const id = WebhookSignature.messageId(h.epoch, run.subscriptionId, sequence)
        const headers = yield* WebhookSignature.sign(
          { id, timestamp: new Date(started), body },
          yield* secretsFor(run, h, started),
        )
        const result = yield* OutboundSender.send(
          { url: h.url, headers: { ...headers, "content-type": "application/json" }, body },
          config.policy,
          {},
          run.connections,
        )
        const answered = yield* Clock.currentTimeMillis
        const ok = result.status !== undefined && result.status >= 200 && result.status < 300
        return { head: h, started, answered, result, ok } satisfies Sent
      }).pipe(
        Effect.withSpan("WebhookDrainer.attempt", {
          attributes: { "webhook.subscription": run.subscriptionId, "webhook.event_seq": String(h.eventSeq) },
        }),
      )

    /**
     * Refusals and redirects are the target's configuration: the operator hears of them, once a
     * minute per subscription. Only the origin is named: a URL's path may hold a secret.
     */
    const warnAbout = (subscriptionId: string, { head, result }: Sent) => {
      const target = `webhooks: subscription ${subscriptionId} (${URL.parse(head.url)?.origin ?? "bad URL"})`
      return result.errorClass === "blocked_ip"
        ? warn(
            subscriptionId,
            `${target}: target refused (${result.refusal ?? "blocked"}); its deliveries wait for retries`,
          )
        : result.errorClass === "redirect"
          ? warn(
              subscriptionId,
              `${target}: the endpoint answered ${result.status}, and redirects are not followed; its deliveries wait for retries`,
            )
          : Effect.void
    }

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
        yield* warnAbout(subscriptionId, sent)
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

    /** The run's loop, from the header's diagram; returns when the slot is let go (or lost). */
    const loop = (run: Run, news: News, start: number) =>
      Effect.gen(function* () {
        for (let n = 0; ; n++) {
          if (n >= maxDeliveries || (yield* Clock.currentTimeMillis) - start >= maxRunMillis) {
            yield* flush(run)
            return yield* new JobKind.JobSnooze({ delay: Duration.zero })
          }
          if (run.queue.length === 0) {
            // Nothing read ahead. Unless the last read was full or a round reported news since,
            // nothing new is pending: wait for a round's news (keeping the slot) and read only then,
            // recording the answers so far with it; after `linger` without news, read once more and
            // let go if still nothing.
            const quiet = lingers && !run.full && !news.fresh()
            if (quiet) yield* news.wait
            const lastChance = quiet && !news.fresh()
            run.queue = yield* recordAndRead(run, news, run.after, true)
            if (run.queue.length === 0 && lingers && !lastChance) continue
            if (run.queue.length === 0) {
              if ((yield* release(run.subscriptionId, run.job)) !== "pending") return
              news.mark()
              continue
            }
          }
          const next = run.queue[0]!
          const h = next.head
          const go = h.sendable && next.allowed
          const now = yield* Clock.currentTimeMillis
          // Checked too long ago, or numbered by nobody (another run renumbered meanwhile): read
          // again before anything goes out, giving back what this run numbered.
          if ((go && h.sequence === null) || (!next.exempt && now - next.checkedAt > maxAgeMillis)) {
            yield* discard(run)
            news.mark()
            continue
          }
          run.queue.shift()
          run.after = h.eventSeq
          if (!go) {
            yield* recordAnswers(run)
            if (h.sendable) yield* suppress(run.subscriptionId, h, "permission")
            else yield* settle(run, h)
            continue
          }
          // While the last head read is out, and more may be pending, the 2xx before it go on record
          // and the next heads are read (with their rights) in one statement: a busy subscription
          // waits for its requests, and for the database about once per read; a caught-up one costs
          // one statement per delivery. Not for an endpoint so slow that what is read now would be
          // too old when its turn comes: that is read after the answer instead.
          const readAlong =
            run.queue.length === 0 &&
            (!lingers || run.full || news.fresh()) &&
            (run.lastRequestMillis === undefined || 2 * run.lastRequestMillis <= maxAgeMillis)
          const [sent] = yield* Effect.all(
            [
              send(run, h, h.sequence!),
              readAlong
                ? Effect.map(recordAndRead(run, news, h.eventSeq, false), (heads) => {
                    run.incoming = heads
                  })
                : Effect.void,
            ],
            { concurrency: 2 },
          )
          run.lastRequestMillis = sent.answered - sent.started
          if (sent.ok) {
            run.succeeded = true
            run.unrecorded.push(sent)
            yield* attemptsBy("delivered")
            yield* Metric.update(WebhookMetrics.latency, sent.answered - h.occurredAt!.getTime())
            yield* headAge(run.subscriptionId, 0)
            if (readAlong) {
              run.queue = run.incoming
              run.incoming = []
            }
            continue
          }
          const clockBefore = run.succeeded
            ? noFailures
            : { firstAt: h.failingFirstAt?.getTime() ?? null, clockAt: h.failingClockAt?.getTime() ?? null }
          yield* discard(run)
          run.unrecorded.push(sent)
          const outcome = yield* withUnrecorded(run, (all) => failed(run.subscriptionId, all, clockBefore))
          if (outcome._tag === "snooze") return yield* new JobKind.JobSnooze({ delay: outcome.delay })
        }
      })

    const drain = Effect.fn("WebhookDrainer.drain")(function* (subscriptionId: string, job: JobKind.JobInfo) {
      const owner = yield* acquire(subscriptionId, job.id)
      if (owner === undefined) return
      if (!(yield* inFlight.enter(owner))) return yield* new JobKind.JobSnooze({ delay: WebhookInFlight.snooze() })
      yield* Effect.addFinalizer(() => inFlight.leave(owner))
      const start = yield* Clock.currentTimeMillis
      const run: Run = {
        subscriptionId,
        job: job.id,
        // Closed when the run ends: no connection outlives the run whose sends checked it.
        connections: yield* OutboundSender.connections(config.policy),
        secrets: new Map(),
        queue: [],
        incoming: [],
        unrecorded: [],
        after: -1n,
        succeeded: false,
        full: false,
        size: readAhead,
        token: undefined,
        lastRequestMillis: undefined,
      }
      const news = yield* listen(subscriptionId)
      // Whatever ends the run (a failed statement, a shutdown interrupting a request), the 2xx
      // answers already received go on record if the database takes them, and the numbers of what
      // was read and not sent go back; answers it does not take are sent again, in order, by the
      // next run.
      return yield* loop(run, news, start).pipe(Effect.ensuring(Effect.ignore(flush(run))))
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
