/**
 * What a drain run does with the deliveries it read and the answers it got, through its state's
 * transitions (`DrainRunState`): the record-and-read of the next deliveries (`recordAndReadNext`),
 * the answers waiting for a record (`withUnrecorded`, `recordAnswered`), and the numbers of what
 * it read and will not send now, given back (`giveBackNumbers`).
 *
 * What it keeps true: the 2xx answers go on record in the order they came, and one that missed a
 * record stays ahead of every later one, so the record only ever misses a suffix of what was sent
 * (sent again, in order, by the next run). Only numbers the run's last numbering handed out are
 * given back (see WebhookNumbering.ts).
 */
import { Clock, Effect } from "effect"
import { webhookDeliver } from "../../authz/Permissions.ts"
import * as ReadWindow from "../../consumer/ReadWindow.ts"
import { daysOfWindow } from "../../log/EventLog.ts"
import { pgFailure } from "../../platform/PgError.ts"
import { type Drain, nextSize, withSql } from "./Drain.ts"
import type { News } from "./DrainNews.ts"
import type { Checked, Run } from "./DrainRunState.ts"
import * as RunState from "./DrainRunState.ts"
import {
  anyTime,
  type EventWindow,
  judgeHealth,
  type PendingDelivery,
  recordAndReadStatement,
  recordAttempts,
  type Sent,
  windowAfter,
} from "./PendingDeliveries.ts"
import * as WebhookNumbering from "./WebhookNumbering.ts"
import { noFailures } from "./WebhookSchedule.ts"

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
    const granted = new Set<PendingDelivery>(sendable.filter((_, i) => answers[i] === true))
    const allowed = (d: PendingDelivery) => granted.has(d)
    // None behind a denied one is numbered (as in the read's statement, see PendingDeliveries.ts).
    const denied = sendable.findIndex((_, i) => answers[i] !== true)
    const go = sendable.slice(0, denied < 0 ? sendable.length : denied)
    const first = go[0]
    if (first === undefined) return { deliveries: rows, allowed, numbered: false }
    const numbers = yield* withSql(
      drain,
      WebhookNumbering.number(
        run.subscriptionId,
        go.map((d) => ({ deliveryId: d.deliveryId, existing: d.existing })),
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
    let offset = run.dbOffsetMillis
    if (since === null || offset === undefined) {
      const seen = yield* windowAfter(drain.sql, run.subscriptionId, after.seq, limit)
      offset = seen.dbNow.getTime() - (yield* Clock.currentTimeMillis)
      RunState.dbClockSeen(run, offset)
      since ??= seen.since
    }
    const until = new Date((yield* Clock.currentTimeMillis) + offset + ReadWindow.aheadMillis)
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
      days: daysOfWindow(window.since, window.until),
    }
    const all = yield* recordAndReadStatement(drain, read, sent, inStatement ? token : null).pipe(
      // A day the read named was dropped meanwhile (retention): the statement wrote nothing, and
      // reads again over `event_log`.
      Effect.catchIf(
        (e) => read.days !== undefined && pgFailure(e).code === "42P01",
        () => recordAndReadStatement(drain, { ...read, days: undefined }, sent, inStatement ? token : null),
      ),
      Effect.withSpan("WebhookDrainer.recordAndReadNext", { attributes: { "webhook.deliveries": sent.length } }),
    )
    if (sent.length > 0) {
      yield* judgeHealth(drain, run.subscriptionId, sent)
      yield* drain.onRecorded(run.subscriptionId)
    }
    const cut = all.findIndex((d) => d.unsure)
    const rows = cut < 0 ? all : all.slice(0, cut)
    RunState.readBack(run, {
      windowless: cut >= 0,
      full: all.length === asked || cut >= 0,
      size: nextSize(drain, run.lastRequestMillis, asked, rows.length),
    })
    const { deliveries, allowed, numbered } = inStatement
      ? { deliveries: rows, allowed: (d: PendingDelivery) => d.allowed === true, numbered: rows[0]?.numbered === true }
      : yield* checkAfterRead(drain, run, rows, token)
    if (numbered) RunState.numbered(run, token)
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
    const sent = RunState.recording(run)
    return f(sent).pipe(Effect.onError(() => Effect.sync(() => RunState.recordFailed(run, sent))))
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
    sent.length === 0
      ? Effect.void
      : recordAttempts(drain, run.subscriptionId, sent, noFailures).pipe(
          Effect.andThen(judgeHealth(drain, run.subscriptionId, sent)),
        ),
  )

/**
 * Gives back the numbers this run handed to the deliveries it read and will not send now (the
 * queue, and what was read along), which are read again before they go.
 */
export const giveBackNumbers = (drain: Drain, run: Run) =>
  Effect.suspend(() => {
    const read = RunState.dropped(run)
    // Only what the run's last numbering handed out: earlier numbers were sent, or read by
    // whoever changed the token since.
    const numbers = read.flatMap((c) =>
      c.numberedBy !== undefined && c.numberedBy === run.token && c.delivery.sequence !== null
        ? [c.delivery.sequence]
        : [],
    )
    return withSql(drain, WebhookNumbering.giveBack(run.subscriptionId, run.token, numbers)).pipe(
      Effect.tap((token) => Effect.sync(() => RunState.gaveBack(run, token))),
      // Whether it went through is unknown: give back nothing numbered so far.
      Effect.onError(() => Effect.sync(() => RunState.gaveBack(run, undefined))),
      Effect.asVoid,
    )
  })

/** Before a run ends: the answers on record, the numbers of what it read and did not send given back. */
export const flush = (drain: Drain, run: Run) => Effect.andThen(recordAnswered(drain, run), giveBackNumbers(drain, run))
