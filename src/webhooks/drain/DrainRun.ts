/**
 * One drain run's state (`Run`) and what it does with the deliveries it read and the answers it
 * got: the record-and-read of the next deliveries (`recordAndReadNext`), the 2xx answers waiting
 * for a record (`withUnrecorded`, `recordAnswered`), and the numbers of what it read and will not
 * send now, given back (`giveBackNumbers`).
 *
 * What it keeps true: the 2xx answers go on record in the order they came, and one that missed a
 * record stays ahead of every later one, so the record only ever misses a suffix of what was sent
 * (sent again, in order, by the next run). Only numbers the run's last numbering handed out are
 * given back (see WebhookNumbering.ts).
 */
import { Clock, Effect, type Redacted } from "effect"
import { webhookDeliver } from "../../authz/Permissions.ts"
import * as ReadWindow from "../../consumer/ReadWindow.ts"
import * as OutboundSender from "../../outbound/OutboundSender.ts"
import { type Drain, nextSize, withSql } from "./Drain.ts"
import type { News } from "./DrainNews.ts"
import {
  anyTime,
  type EventWindow,
  type PendingDelivery,
  recordAndReadStatement,
  recordAttempts,
  type Sent,
  windowAfter,
} from "./PendingDeliveries.ts"
import * as WebhookNumbering from "./WebhookNumbering.ts"
import { noFailures } from "./WebhookSchedule.ts"

/** A pending delivery with the owner's right on its space, checked when it was read. */
export interface Checked {
  readonly delivery: PendingDelivery
  readonly allowed: boolean
  /** When the statement that read its right and scope started (by the run's `Clock`). */
  readonly checkedAt: number
  /** The first delivery of a read the run waited for: nothing happened since, however long the read took. */
  readonly exempt: boolean
  /** The token its read's numbering set, if that statement gave it its number. */
  readonly numberedBy: string | undefined
}

/** What one run keeps between its steps. */
export interface Run {
  readonly subscriptionId: string
  readonly job: bigint
  /**
   * The job's attempt this run is: once a later one is claimed (the job was rescued from a worker
   * whose lease lapsed while this run went on), the run reads the slot as lost and stops sending.
   */
  readonly attempt: number
  /** When the run began (by its `Clock`): it snoozes 0 after `Drain.maxRunMillis`. */
  readonly start: number
  /** Keep-alive connections and opened secrets, shared by the run's requests. */
  readonly connections: OutboundSender.Connections
  readonly secrets: Map<string, Redacted.Redacted<string>>
  /** Steps taken: it snoozes 0 after `Drain.maxDeliveries`. */
  steps: number
  /** Read and checked, not sent yet, in seq order. */
  queue: Array<Checked>
  /** Read along with the request in flight; the queue once that request is answered. */
  incoming: Array<Checked>
  /** Answered 2xx, not on record yet, in seq order. */
  unrecorded: Array<Sent>
  /** The seq of the last delivery this run sent or settled: every pending one before it is on record. */
  after: bigint
  /** The time of `after`'s event when known: the events of later deliveries are no older. */
  afterAt: Date | null
  /** The database's clock less the run's, once a read has looked it up. */
  dbOffsetMillis: number | undefined
  /** A read found a delivery whose event may lie outside its window: the next one reads without. */
  windowless: boolean
  /** A 2xx in this run has reset the failing clock the deliveries were read with. */
  succeeded: boolean
  /** The last read came back full: more may be pending, so read again at once. */
  full: boolean
  /** Deliveries the next read asks for. */
  size: number
  /** The token of the run's last numbering, while the subscription may still hold it. */
  token: string | undefined
  /**
   * How long the last request took, or the rate limit's interval if longer: what the next
   * deliveries read ahead must wait for, each.
   */
  lastRequestMillis: number | undefined
  /** When the subscription's last request started (by `Clock`), by this run or, once read (`DrainPace`), any before it. */
  lastRequestAt: number | undefined
  /** `lastRequestAt` is known: this run sent, or read it from the record. */
  lastRequestKnown: boolean
}

/** A run of `job`'s `attempt` on the subscription; its connections close with the scope. */
export const makeRun = (drain: Drain, subscriptionId: string, job: bigint, attempt: number) =>
  Effect.gen(function* () {
    const start = yield* Clock.currentTimeMillis
    return {
      subscriptionId,
      job,
      attempt,
      start,
      // Closed when the run ends: no connection outlives the run whose sends checked it.
      connections: yield* OutboundSender.connections(drain.config.policy),
      secrets: new Map(),
      steps: 0,
      queue: [],
      incoming: [],
      unrecorded: [],
      after: -1n,
      afterAt: null,
      dbOffsetMillis: undefined,
      windowless: false,
      succeeded: false,
      full: false,
      size: drain.readAhead,
      token: undefined,
      lastRequestMillis: undefined,
      lastRequestAt: undefined,
      lastRequestKnown: false,
    } satisfies Run as Run
  })

/**
 * Rights `Permissions` did not answer in the read's statement: asked in one `allowedEach` call,
 * and the allowed deliveries numbered in one more statement.
 */
const checkAfterRead = (drain: Drain, run: Run, rows: ReadonlyArray<PendingDelivery>, token: string) =>
  Effect.gen(function* () {
    const sendable = rows.filter((d) => d.sendable)
    const answers =
      sendable.length === 0
        ? []
        : yield* drain.permissions.allowedEach(
            sendable.map((d) => ({ principal: d.owner, action: webhookDeliver, spaceId: d.space! })),
          )
    const go = new Set<PendingDelivery>(sendable.filter((_, i) => answers[i] === true))
    const allowed = (d: PendingDelivery) => go.has(d)
    const first = rows.find((d) => go.has(d))
    if (first === undefined) return { deliveries: rows, allowed, numbered: false }
    const numbers = yield* withSql(
      drain,
      WebhookNumbering.number(
        run.subscriptionId,
        [...go].map((d) => ({ deliveryId: d.deliveryId, existing: d.existing })),
        first.tokenSeen,
        token,
      ),
    )
    const byId = new Map(numbers.map((n) => [n.deliveryId, n]))
    const deliveries = rows.map((d) => {
      const n = byId.get(d.deliveryId)
      return n === undefined ? d : { ...d, sequence: n.sequence, numberedHere: n.numberedHere }
    })
    return { deliveries, allowed, numbered: numbers.some((n) => n.sequence !== null) }
  })

/** Where a read starts: after the delivery of event `seq`, whose time is `at` when known. */
export interface After {
  readonly seq: bigint
  readonly at: Date | null
}

/**
 * The window of the next read (see `EventWindow`): from the time of `after`'s event, or else the
 * earliest of the deliveries to read, looked up first (as is the database's clock, once a run);
 * to the database's clock plus a minute. None after a read found the window too narrow.
 */
const windowFor = (drain: Drain, run: Run, after: After, limit: number) =>
  Effect.gen(function* () {
    if (run.windowless) return anyTime
    let since = after.at
    if (since === null || run.dbOffsetMillis === undefined) {
      const seen = yield* windowAfter(drain.sql, run.subscriptionId, after.seq, limit)
      run.dbOffsetMillis = seen.dbNow.getTime() - (yield* Clock.currentTimeMillis)
      since ??= seen.since
    }
    const until = new Date((yield* Clock.currentTimeMillis) + run.dbOffsetMillis + ReadWindow.aheadMillis)
    return { since, until } satisfies EventWindow
  })

/**
 * Puts the 2xx `sent` on record and reads (and numbers) the next pending deliveries after `after`;
 * rights that `Permissions` did not answer in that statement are asked after it
 * (`checkAfterRead`). `waited`: the run waits for this read before anything else.
 */
const recordAndReadNext = (drain: Drain, run: Run, sent: ReadonlyArray<Sent>, after: After, waited: boolean) =>
  Effect.gen(function* () {
    const asked = run.size
    const window = yield* windowFor(drain, run, after, asked)
    const checkedAt = yield* Clock.currentTimeMillis
    const inStatement = drain.permissions.inSql !== undefined
    const token = WebhookNumbering.newToken()
    const read = {
      subscriptionId: run.subscriptionId,
      job: run.job,
      attempt: run.attempt,
      after: after.seq,
      limit: asked,
      window,
    }
    const all = yield* recordAndReadStatement(drain, read, sent, inStatement ? token : null).pipe(
      Effect.withSpan("WebhookDrainer.recordAndReadNext", { attributes: { "webhook.deliveries": sent.length } }),
    )
    if (sent.length > 0) yield* drain.onRecorded(run.subscriptionId)
    const cut = all.findIndex((d) => d.unsure)
    const rows = cut < 0 ? all : all.slice(0, cut)
    run.windowless = cut >= 0
    run.full = all.length === asked || cut >= 0
    run.size = nextSize(drain, run.lastRequestMillis, asked, rows.length)
    const { deliveries, allowed, numbered } = inStatement
      ? { deliveries: rows, allowed: (d: PendingDelivery) => d.allowed === true, numbered: rows[0]?.numbered === true }
      : yield* checkAfterRead(drain, run, rows, token)
    if (numbered) run.token = token
    return deliveries.map(
      (delivery, i): Checked => ({
        delivery,
        allowed: allowed(rows[i]!),
        checkedAt,
        exempt: waited && i === 0,
        numberedBy: numbered && delivery.numberedHere ? token : undefined,
      }),
    )
  })

/**
 * Runs `f` on the 2xx answers not on record yet; should it fail, they stay unrecorded ahead of
 * any later ones, so the record never skips over them.
 */
export const withUnrecorded = <A, E, R>(run: Run, f: (sent: ReadonlyArray<Sent>) => Effect.Effect<A, E, R>) =>
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

/**
 * Records the 2xx answers so far and reads the next deliveries after `after`. The news flag is
 * cleared before the statement: a round that commits while it runs sets it again, and the
 * drainer reads once more.
 */
export const readNext = (drain: Drain, run: Run, news: News, after: After, waited: boolean) =>
  Effect.suspend(() => {
    news.clear()
    return withUnrecorded(run, (sent) => recordAndReadNext(drain, run, sent, after, waited))
  })

/** Puts the 2xx answers so far on record, if any. */
export const recordAnswered = (drain: Drain, run: Run) =>
  withUnrecorded(run, (sent) =>
    sent.length === 0 ? Effect.void : Effect.asVoid(recordAttempts(drain, run.subscriptionId, sent, noFailures)),
  )

/**
 * Gives back the numbers this run handed to the deliveries it read and will not send now (the
 * queue, and what was read along), which are read again before they go.
 */
export const giveBackNumbers = (drain: Drain, run: Run) =>
  Effect.suspend(() => {
    const read = [...run.queue, ...run.incoming]
    run.queue = []
    run.incoming = []
    // Only what the run's last numbering handed out: earlier numbers were sent, or read by
    // whoever changed the token since.
    const numbers = read.flatMap((c) =>
      c.numberedBy !== undefined && c.numberedBy === run.token && c.delivery.sequence !== null
        ? [c.delivery.sequence]
        : [],
    )
    return withSql(drain, WebhookNumbering.giveBack(run.subscriptionId, run.token, numbers)).pipe(
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

/** Before a run ends: the answers on record, the numbers of what it read and did not send given back. */
export const flush = (drain: Drain, run: Run) => Effect.andThen(recordAnswered(drain, run), giveBackNumbers(drain, run))
