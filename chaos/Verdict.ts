/**
 * The verdict of a chaos run, computed after the drain from the database (the log, the delivery
 * rows, the push jobs, the cursors, the subscriptions) and from what the two receivers recorded,
 * judged against the world and the harness's `History`, never against bothy's own counters:
 *
 * - every (event, receiver) has exactly one delivery row (webhooks) or job (push), none extra;
 * - every delivery allowed at its time arrived at least once (accepted: 2xx), and by `webhook-id`
 *   (push: by registration and message id) its effect counts once;
 * - per subscription, first arrivals come in seq order and the `sequence` numbers seen run 1..N;
 * - nothing arrived while its right was surely revoked: a right counts as revoked at a time `t`
 *   when a revoke had committed before `t - slack` and its restore had not begun by `t` (the slack
 *   covers the time from the sender's check to the arrival: `webhook.permission_max_age` and a
 *   margin); a delivery bothy ended as denied must have met a revoke within that slack;
 * - the cursors are at the head, no job is left running, the log is gapless but for the range
 *   retention took, and that range disabled exactly the subscriptions that began before it, with
 *   cause `gap`.
 */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"
import type * as History from "./History.ts"
import type { Produced } from "./Producers.ts"
import type { PushReceiver } from "./PushReceiver.ts"
import type { Receiver } from "./Receiver.ts"
import type { Tenants } from "./Tenants.ts"
import * as World from "./World.ts"

export interface Options {
  /** `webhook.permission_max_age` plus a margin for the request to arrive. */
  readonly webhookSlackMillis: number
  /** From the push job's check to its arrival. */
  readonly pushSlackMillis: number
}

export const defaults: Options = { webhookSlackMillis: 1000 + 9000, pushSlackMillis: 10_000 }

interface LoggedEvent {
  readonly seq: bigint
  readonly epoch: number
  readonly space: string
  readonly type: string
  readonly actor: string
  readonly key: string | null
}

/** Counts that must be zero, by name. */
export interface Zeros {
  readonly duplicates_created: number
  readonly lost: number
  readonly order_violations: number
  readonly sequence_gaps: number
  readonly denied_but_delivered: number
  readonly wrongly_denied: number
  readonly jobs_left_running: number
  readonly deliveries_left_pending: number
  readonly cursors_behind_head: number
  readonly log_holes: number
  readonly committed_missing_from_log: number
  readonly rolled_back_in_log: number
  readonly gaps_unreported: number
  readonly unverified_requests: number
  readonly undecryptable_pushes: number
  readonly doubled_effects: number
  readonly sent_after_gone: number
  readonly workers_exited_unasked: number
  readonly worker_start_failures_unexplained: number
  readonly faults_not_carried_out: number
}

export interface Verdict {
  readonly zeros: Zeros
  readonly figures: Record<string, number>
  readonly resends: Record<string, number>
  readonly examples: Record<string, ReadonlyArray<string>>
}

const inWindow = (windows: ReadonlyArray<History.GrantWindow>, principal: string, action: string, space: string) =>
  windows.filter((w) => w.grant.principal === principal && w.grant.action === action && w.grant.space === space)

/** Surely revoked all through [from, to]. */
const surelyRevoked = (windows: ReadonlyArray<History.GrantWindow>, from: number, to: number) =>
  windows.some((w) => w.revokeTo <= from && to <= w.restoreFrom)

/** Possibly revoked at some time in [from, to]. */
const maybeRevoked = (windows: ReadonlyArray<History.GrantWindow>, from: number, to: number) =>
  windows.some((w) => w.revokeFrom <= to && from <= w.restoreTo)

const muted = (mutes: ReadonlyArray<World.Mute>, e: LoggedEvent) =>
  mutes.some((m) => (m.space === undefined || m.space === e.space) && (m.type === undefined || m.type === e.type))

const crashKinds = new Set(["sigkill", "sigterm", "terminate-backends", "pg-restart"])

export const judge = (input: {
  readonly world: World.World
  readonly tenants: Tenants
  readonly produced: Produced
  readonly receiver: Receiver
  readonly push: PushReceiver
  readonly history: History.History
  /** Workers that exited on their own while running. */
  readonly unexpectedExits: number
  /** Workers whose start failed (bothy exits 1 then, by design, when its database is away). */
  readonly startFailures: number
  /** Of those, the ones no fault accounts for (`Workers.faultExplains`). */
  readonly startFailuresUnexplained: number
  readonly jobsLeftRunning: number
  readonly options?: Options
}) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const options = input.options ?? defaults
    const { world, tenants, produced, history } = input
    const examples: Record<string, Array<string>> = {}
    const example = (name: string, text: string) => {
      const list = examples[name] ?? []
      examples[name] = list
      if (list.length < 5) list.push(text)
    }

    const events = yield* sql<LoggedEvent>`
      SELECT seq, epoch, space_id AS space, type, actor, payload ->> 'key' AS key FROM event_log ORDER BY seq`
    const [top] = yield* sql<{ head: bigint }>`SELECT value AS head FROM event_seq`
    const head = top!.head
    const cursors = yield* sql<{ name: string; lastSeq: bigint }>`
      SELECT name, last_seq AS "lastSeq" FROM event_consumer_cursors WHERE name IN ('webhooks', 'push')`
    const subscriptions = yield* sql<{ id: string; state: string; cause: string | null }>`
      SELECT id::text, state, disabled_cause AS cause FROM webhook_subscriptions`
    const deliveries = yield* sql<{
      sub: string
      seq: bigint
      state: string
      reason: string | null
      finished: Date | null
      sequence: bigint | null
    }>`SELECT subscription_id::text AS sub, event_seq AS seq, state, dead_reason AS reason, finished_at AS finished,
              sequence
       FROM webhook_deliveries`
    const jobs = yield* sql<{
      registration: string
      seq: string
      state: string
      finalized: Date | null
      errors: unknown
    }>`
      SELECT args ->> 'registration' AS registration, args ->> 'seq' AS seq, state::text AS state,
             finalized_at AS finalized, errors
      FROM jobs WHERE kind = 'push.deliver'`
    const endings = yield* sql<{ state: string; reason: string | null; n: number }>`
      SELECT state, dead_reason AS reason, count(*)::int AS n FROM webhook_deliveries GROUP BY 1, 2 ORDER BY 1, 2`
    const registered = new Set((yield* sql<{ id: string }>`SELECT id::text FROM push_registrations`).map((r) => r.id))

    // The log: gapless but for the range retention took; committed keys in, rolled-back ones out.
    const bySeq = new Map(events.map((e) => [e.seq, e]))
    const byKey = new Map<string, LoggedEvent>()
    let duplicateKeys = 0
    for (const e of events) {
      if (e.key === null) continue
      if (byKey.has(e.key)) duplicateKeys++
      byKey.set(e.key, e)
    }
    const lostSeqs = new Set(tenants.oldSeqs)
    let logHoles = 0
    for (let s = 1n; s <= head; s++)
      if (!bySeq.has(s) && !lostSeqs.has(s)) {
        logHoles++
        example("log_holes", `seq ${s}`)
      }
    const committedMissing = [...produced.committed].filter((k) => !byKey.has(k))
    for (const k of committedMissing.slice(0, 5)) example("committed_missing_from_log", k)
    const rolledBackInLog = [...produced.rolledBack].filter((k) => byKey.has(k))
    for (const k of rolledBackInLog.slice(0, 5)) example("rolled_back_in_log", k)
    const live = events.filter((e) => e.key !== null)

    // The gap: the old events gone, the consumers were behind them, exactly the gap subscriptions disabled.
    let gapsUnreported = 0
    const firstLost = tenants.oldSeqs[0] ?? 0n
    if (history.gap === undefined) {
      gapsUnreported++
      example("gaps_unreported", "the retention-gap fault did not run")
    } else if (history.gap.cursors.some((c) => c.lastSeq >= firstLost)) {
      gapsUnreported++
      example("gaps_unreported", "a consumer was not behind the old events when retention took them")
    }
    for (const s of tenants.oldSeqs)
      if (bySeq.has(s)) {
        gapsUnreported++
        example("gaps_unreported", `old event ${s} is still in the log`)
      }
    const stateOf = new Map(subscriptions.map((s) => [s.id, s]))
    for (const s of tenants.subscriptions) {
      const row = stateOf.get(s.id)
      const disabledForGap = row?.state === "disabled" && row.cause === "gap"
      if (s.plan.gap !== disabledForGap) {
        gapsUnreported++
        example("gaps_unreported", `${s.plan.name}: ${row?.state}/${row?.cause} (gap subscription: ${s.plan.gap})`)
      }
    }

    // Webhooks.
    let duplicatesCreated = duplicateKeys
    let lost = 0
    let orderViolations = 0
    let sequenceGaps = 0
    // The documented edge (docs/receivers.md, "Webhooks"): a number a crashed drainer left on its
    // delivery, which was then suppressed when read again; its request may have gone out, so the
    // number stays.
    let sequenceGapsSuppressedAfterCrash = 0
    let deniedButDelivered = 0
    let wronglyDenied = 0
    let pendingLeft = 0
    let doubled = 0
    let unverified = 0
    let webhookArrivals = 0
    let webhookAccepted = 0
    let suppressed = 0
    const resends: Record<string, number> = {}
    const countResend = (cause: string) => {
      resends[cause] = (resends[cause] ?? 0) + 1
    }
    const causeBefore = (at: number) => {
      let cause = "no fault before"
      for (const f of history.injected) if (f.at <= at && crashKinds.has(f.kind)) cause = f.kind
      return cause
    }
    const rowsBySub = Map.groupBy(deliveries, (d) => d.sub)
    const arrivalsByPath = Map.groupBy(input.receiver.arrivals, (a) => a.path)
    let deliveryRows = 0
    for (const s of tenants.subscriptions) {
      const plan = s.plan
      const rows = rowsBySub.get(s.id) ?? []
      const arrivals = arrivalsByPath.get(input.receiver.pathOf(plan.name)) ?? []
      webhookArrivals += arrivals.length
      const windowsOf = (space: string) => inWindow(history.grantWindows, plan.owner, World.webhookAction, space)
      if (plan.gap) {
        const got = arrivals.filter((a) => a.status >= 200 && a.status < 300)
        if (got.length > 0) {
          gapsUnreported++
          example("gaps_unreported", `${plan.name} (began before the gap) received ${got.length} deliveries`)
        }
        continue
      }
      deliveryRows += rows.length
      const matches = (e: LoggedEvent) =>
        e.key !== null &&
        e.seq > s.startedSeq &&
        plan.scope.includes(e.space) &&
        (plan.eventTypes.length === 0 || plan.eventTypes.includes(e.type))
      const rowOf = new Map<bigint, (typeof rows)[number]>()
      for (const r of rows) {
        if (rowOf.has(r.seq)) duplicatesCreated++
        rowOf.set(r.seq, r)
        const e = bySeq.get(r.seq)
        if (e === undefined || !matches(e)) {
          duplicatesCreated++
          example("duplicates_created", `${plan.name}: a delivery row for seq ${r.seq}, which it does not match`)
        }
        if (r.state === "pending") {
          pendingLeft++
          example("deliveries_left_pending", `${plan.name} seq ${r.seq}`)
        }
      }
      // Arrivals: verified, one webhook-id per event, in seq order, numbered 1..N, never while surely revoked.
      const accepted = new Map<string, { key: string; sequence: number }>()
      const idsOfKey = new Map<string, Set<string>>()
      const seen = new Map<string, number>()
      // Every number the receiver saw, answered or not: one seen only on a failed request whose
      // delivery was then denied is no gap (the denial is judged on its own).
      const seenSequences = new Set<number>()
      let maxSeq = 0n
      let maxSequence = 0
      for (const a of arrivals) {
        if (!a.verified) {
          unverified++
          example("unverified_requests", `${plan.name} ${a.webhookId}`)
          continue
        }
        const e = byKey.get(a.key)
        if (e === undefined || !matches(e)) {
          duplicatesCreated++
          example("duplicates_created", `${plan.name}: received ${a.key}, which it does not match`)
          continue
        }
        const windows = windowsOf(e.space)
        if (surelyRevoked(windows, a.at - options.webhookSlackMillis, a.at)) {
          deniedButDelivered++
          example("denied_but_delivered", `${plan.name} ${a.key} at ${new Date(a.at).toISOString()}`)
        }
        const before = seen.get(a.webhookId)
        if (before === undefined) {
          if (e.seq <= maxSeq || a.sequence <= maxSequence) {
            orderViolations++
            example(
              "order_violations",
              `${plan.name}: ${a.key} (seq ${e.seq}, sequence ${a.sequence}, ${a.webhookId}) at ${new Date(a.at).toISOString()} after seq ${maxSeq} (sequence ${maxSequence})`,
            )
          }
          maxSeq = e.seq > maxSeq ? e.seq : maxSeq
          maxSequence = Math.max(maxSequence, a.sequence)
        } else if (before > 0) {
          countResend(causeBefore(a.at))
        } else {
          countResend(`retry after receiver answer ${before === 0 ? "hang" : -before}`)
        }
        const ok = a.status >= 200 && a.status < 300
        seen.set(a.webhookId, before !== undefined && before > 0 ? before : ok ? 1 : -a.status)
        seenSequences.add(a.sequence)
        if (!ok) continue
        webhookAccepted++
        const known = accepted.get(a.webhookId)
        if (known !== undefined && (known.key !== a.key || known.sequence !== a.sequence)) {
          duplicatesCreated++
          example("duplicates_created", `${plan.name}: webhook-id ${a.webhookId} came with other content`)
        }
        accepted.set(a.webhookId, { key: a.key, sequence: a.sequence })
        idsOfKey.set(a.key, (idsOfKey.get(a.key) ?? new Set()).add(a.webhookId))
      }
      for (const [key, ids] of idsOfKey)
        if (ids.size > 1) {
          doubled++
          example("doubled_effects", `${plan.name}: ${key} under ${[...ids].join(", ")}`)
        }
      const sequences = seenSequences
      const top = Math.max(0, ...sequences)
      if (sequences.size !== top) {
        // What holds each missing number, so that a gap can be told from a loss.
        const holders = new Map(rows.filter((r) => r.sequence !== null).map((r) => [Number(r.sequence), r]))
        for (let n = 1; n <= top; n++) {
          if (sequences.has(n)) continue
          const r = holders.get(n)
          const held = r === undefined ? "no row" : `seq ${r.seq} ${r.state}${r.reason === null ? "" : `/${r.reason}`}`
          if (r?.state === "dead" && (r.reason === "permission" || r.reason === "scope")) {
            sequenceGapsSuppressedAfterCrash++
            example("sequence_gaps_suppressed_after_crash", `${plan.name}: number ${n} (${held})`)
          } else {
            sequenceGaps++
            example("sequence_gaps", `${plan.name}: number ${n} never seen (${held})`)
          }
        }
      }
      // Every matching event: a row, and an accepted arrival unless it was denied while revoked.
      for (const e of live) {
        if (!matches(e)) continue
        const row = rowOf.get(e.seq)
        if (row === undefined) {
          lost++
          example("lost", `${plan.name}: no delivery row for seq ${e.seq} (${e.key})`)
          continue
        }
        if (row.state === "dead" && row.reason === "permission") {
          suppressed++
          const at = row.finished?.getTime() ?? 0
          if (!maybeRevoked(windowsOf(e.space), at - options.webhookSlackMillis, at)) {
            wronglyDenied++
            example("wrongly_denied", `${plan.name}: seq ${e.seq} denied at ${row.finished?.toISOString()}`)
          }
          continue
        }
        if (!idsOfKey.has(e.key!)) {
          lost++
          example(
            "lost",
            `${plan.name}: seq ${e.seq} (${e.key}) is ${row.state}${row.reason ? ` (${row.reason})` : ""}, never accepted`,
          )
        }
      }
    }

    // Push.
    const principalOf = new Map(world.principals.map((p) => [p.principal, p]))
    const jobsByKey = new Map<string, Array<(typeof jobs)[number]>>()
    for (const j of jobs) {
      const k = `${j.registration}/${j.seq}`
      jobsByKey.set(k, [...(jobsByKey.get(k) ?? []), j])
    }
    for (const [k, list] of jobsByKey)
      if (list.length > 1) {
        duplicatesCreated += list.length - 1
        example("duplicates_created", `push job ${k} x${list.length}`)
      }
    const pushByRegistration = Map.groupBy(input.push.arrivals, (a) => a.registration)
    let pushArrivals = 0
    let pushAccepted = 0
    let pushJobsExpected = 0
    let sentAfterGone = 0
    let pushDenied = 0
    for (const r of tenants.registrations) {
      const plan = principalOf.get(r.principal)!
      const arrivals = pushByRegistration.get(r.name) ?? []
      pushArrivals += arrivals.length
      const windowsOf = (space: string) => inWindow(history.grantWindows, plan.principal, World.pushAction, space)
      const goneAt = arrivals.find((a) => a.status === 410)?.at
      // The push service says 410 for good once the fault came; bothy must remove the registration
      // (the harness saw when) and send it nothing after that.
      const removedAt = r.name === world.doomed ? history.pushRemovedAt : undefined
      if (r.name === world.doomed && (goneAt === undefined || removedAt === undefined || registered.has(r.id))) {
        sentAfterGone++
        example(
          "sent_after_gone",
          `${r.name}: the 410 ${goneAt === undefined ? "never came" : "left the registration in place"}`,
        )
      }
      const acceptedIds = new Set<string>()
      const seen = new Map<string, number>()
      for (const a of arrivals) {
        const seq = BigInt(a.id.split(".")[1] ?? "0")
        const e = bySeq.get(seq)
        if (removedAt !== undefined && a.at > removedAt + options.pushSlackMillis) {
          sentAfterGone++
          example("sent_after_gone", `${r.name}: ${a.id} at ${new Date(a.at).toISOString()}`)
        }
        if (e !== undefined && surelyRevoked(windowsOf(e.space), a.at - options.pushSlackMillis, a.at)) {
          deniedButDelivered++
          example("denied_but_delivered", `push ${r.name} ${a.id} at ${new Date(a.at).toISOString()}`)
        }
        const before = seen.get(a.id)
        if (before !== undefined)
          countResend(
            before > 0 ? `push: ${causeBefore(a.at)}` : `push: retry after answer ${before === 0 ? "hang" : -before}`,
          )
        const ok = a.status >= 200 && a.status < 300
        seen.set(a.id, before !== undefined && before > 0 ? before : ok ? 1 : -a.status)
        if (ok) {
          pushAccepted++
          acceptedIds.add(a.id)
        }
      }
      for (const e of live) {
        if (!plan.spaces.includes(e.space) || e.actor === plan.principal || muted(plan.mutes, e)) continue
        pushJobsExpected++
        const id = `${e.epoch}.${e.seq}`
        const [job] = jobsByKey.get(`${r.id}/${e.seq}`) ?? []
        if (acceptedIds.has(id)) continue
        if (job === undefined) {
          // The doomed registration is removed at its 410: later rounds make nothing for it.
          if (r.name === world.doomed && goneAt !== undefined) continue
          lost++
          example("lost", `push ${r.name}: no job for seq ${e.seq}`)
          continue
        }
        const finalized = job.finalized?.getTime()
        if (r.name === world.doomed && goneAt !== undefined && (finalized === undefined || finalized >= goneAt))
          continue
        const denied = job.state === "cancelled" && JSON.stringify(job.errors).includes("lacks")
        if (denied) {
          pushDenied++
          if (!maybeRevoked(windowsOf(e.space), (finalized ?? 0) - options.pushSlackMillis, finalized ?? 0)) {
            wronglyDenied++
            example("wrongly_denied", `push ${r.name}: seq ${e.seq} denied at ${job.finalized?.toISOString()}`)
          }
          continue
        }
        if (job.state !== "completed" && job.state !== "cancelled" && job.state !== "discarded") {
          pendingLeft++
          example("deliveries_left_pending", `push ${r.name} seq ${e.seq}: ${job.state}`)
        }
        lost++
        example("lost", `push ${r.name}: seq ${e.seq} job ${job.state}, never accepted`)
      }
      for (const j of jobs.filter((j) => j.registration === r.id)) {
        const e = bySeq.get(BigInt(j.seq))
        if (e === undefined || !plan.spaces.includes(e.space) || e.actor === plan.principal || muted(plan.mutes, e)) {
          duplicatesCreated++
          example("duplicates_created", `push job for ${r.name} seq ${j.seq}, which its principal does not hear of`)
        }
      }
    }

    const behind = cursors.filter((c) => c.lastSeq !== head)
    for (const c of behind) example("cursors_behind_head", `${c.name} at ${c.lastSeq}, head ${head}`)
    for (const f of history.failed) example("faults_not_carried_out", f.detail)

    const zeros: Zeros = {
      duplicates_created: duplicatesCreated,
      lost,
      order_violations: orderViolations,
      sequence_gaps: sequenceGaps,
      denied_but_delivered: deniedButDelivered,
      wrongly_denied: wronglyDenied,
      jobs_left_running: input.jobsLeftRunning,
      deliveries_left_pending: pendingLeft,
      cursors_behind_head: behind.length,
      log_holes: logHoles,
      committed_missing_from_log: committedMissing.length,
      rolled_back_in_log: rolledBackInLog.length,
      gaps_unreported: gapsUnreported,
      unverified_requests: unverified,
      undecryptable_pushes: input.push.rejections.length,
      doubled_effects: doubled,
      sent_after_gone: sentAfterGone,
      workers_exited_unasked: input.unexpectedExits,
      worker_start_failures_unexplained: input.startFailuresUnexplained,
      faults_not_carried_out: history.failed.length,
    }
    const figures: Record<string, number> = {
      events: live.length,
      events_lost_to_retention: tenants.oldSeqs.length,
      head: Number(head),
      transactions: produced.transactions,
      committed_keys: produced.committed.size,
      rolled_back_keys: produced.rolledBack.size,
      in_doubt_keys: produced.inDoubt.size,
      in_doubt_in_log: [...produced.inDoubt].filter((k) => byKey.has(k)).length,
      webhook_delivery_rows: deliveryRows,
      webhook_requests: webhookArrivals,
      webhook_accepted: webhookAccepted,
      webhook_denied: suppressed,
      push_jobs: jobs.length,
      push_expected: pushJobsExpected,
      push_messages: pushArrivals,
      push_accepted: pushAccepted,
      push_denied: pushDenied,
      worker_start_failures: input.startFailures,
      sequence_gaps_suppressed_after_crash: sequenceGapsSuppressedAfterCrash,
      ...Object.fromEntries(endings.map((e) => [`webhook_rows_${e.state}${e.reason ? `_${e.reason}` : ""}`, e.n])),
    }
    return { zeros, figures, resends, examples } satisfies Verdict
  })
