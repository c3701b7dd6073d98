/**
 * What a chaos run's judges read: the harness's records (the world, the tenants, what the
 * producers and receivers saw, the history of faults) next to what the database holds, indexed
 * once. For each subscription it lines up the verified arrivals with the events they carried and
 * what their `webhook-id` met before, and gives every event it owes a fate; for each push
 * registration likewise. A fate is decided here only, so that the judges of different counts
 * (lost, left pending, wrongly denied) never classify one delivery two ways.
 */
import type * as History from "../History.ts"
import type { Produced } from "../Producers.ts"
import type * as PushReceiver from "../PushReceiver.ts"
import type * as Receiver from "../Receiver.ts"
import type * as Tenants from "../Tenants.ts"
import type * as World from "../World.ts"
import type { DeliveryRow, LoggedEvent, PushJob, Recorded } from "./Recorded.ts"

export interface Options {
  /** `webhook.permission_max_age` plus a margin for the request to arrive. */
  readonly webhookSlackMillis: number
  /** From the push job's check to its arrival. */
  readonly pushSlackMillis: number
}

export const defaults: Options = { webhookSlackMillis: 1000 + 9000, pushSlackMillis: 10_000 }

/** What the harness recorded of a run, besides the database. */
export interface Run {
  readonly world: Pick<World.World, "principals" | "doomed">
  readonly tenants: Tenants.Tenants
  readonly produced: Produced
  readonly receiver: {
    readonly arrivals: ReadonlyArray<Receiver.Arrival>
    readonly pathOf: (name: string) => string
  }
  readonly push: {
    readonly arrivals: ReadonlyArray<PushReceiver.Arrival>
    readonly rejections: ReadonlyArray<PushReceiver.Rejection>
  }
  readonly history: History.History
  /** Workers that exited on their own while running. */
  readonly unexpectedExits: number
  /** Workers whose start failed (bothy exits 1 then, by design, when its database is away). */
  readonly startFailures: number
  /** Of those, the ones no fault accounts for (`Workers.faultExplains`). */
  readonly startFailuresUnexplained: number
  readonly options?: Options
}

/**
 * What earlier arrivals under one id met: undefined for the first, 1 once one was accepted, else
 * minus the last answer (0 for a hang).
 */
export type Before = number | undefined

export interface Received {
  readonly arrival: Receiver.Arrival
  /** The event it carried, when the subscription matches it; undefined for a stray. */
  readonly event: LoggedEvent | undefined
  readonly before: Before
}

export interface Owed {
  readonly event: LoggedEvent
  readonly row: DeliveryRow | undefined
  readonly fate: "accepted" | "no row" | "denied" | "unaccepted"
}

export interface SubscriptionFacts {
  readonly plan: World.SubscriptionPlan
  readonly rows: ReadonlyArray<DeliveryRow>
  /** Every request at its path, verified or not. */
  readonly arrivals: ReadonlyArray<Receiver.Arrival>
  /** The verified ones, in order of arrival. */
  readonly received: ReadonlyArray<Received>
  readonly matches: (e: LoggedEvent) => boolean
  /** Each key accepted (2xx), with the `webhook-id`s it was accepted under. */
  readonly acceptedIds: ReadonlyMap<string, ReadonlySet<string>>
  /** Every live event it matches. */
  readonly owed: ReadonlyArray<Owed>
}

export interface PushReceived {
  readonly arrival: PushReceiver.Arrival
  readonly event: LoggedEvent | undefined
  readonly before: Before
}

export interface PushOwed {
  readonly event: LoggedEvent
  readonly job: PushJob | undefined
  /** `gone`: owed to the doomed registration after its 410, which ends what it is owed. */
  readonly fate: "accepted" | "gone" | "no job" | "denied" | "unaccepted"
}

export interface RegistrationFacts {
  readonly registration: Tenants.Registration
  readonly plan: World.PrincipalPlan
  readonly doomed: boolean
  readonly received: ReadonlyArray<PushReceived>
  /** The first 410 the push service answered it. */
  readonly goneAt: number | undefined
  /** When the harness saw the doomed registration removed. */
  readonly removedAt: number | undefined
  readonly hears: (e: LoggedEvent) => boolean
  /** Every live event its principal hears of. */
  readonly owed: ReadonlyArray<PushOwed>
  readonly jobs: ReadonlyArray<PushJob>
}

export interface Ledger {
  readonly run: Run
  readonly recorded: Recorded
  readonly options: Options
  readonly bySeq: ReadonlyMap<bigint, LoggedEvent>
  readonly byKey: ReadonlyMap<string, LoggedEvent>
  /** How many events the log holds under a key another one holds too. */
  readonly keysLoggedTwice: number
  /** The producers' events (the old ones the harness dated back have no key). */
  readonly live: ReadonlyArray<LoggedEvent>
  /** The subscriptions that began after the gap; `gapSubscriptions` the two before it. */
  readonly subscriptions: ReadonlyArray<SubscriptionFacts>
  readonly gapSubscriptions: ReadonlyArray<{
    readonly plan: World.SubscriptionPlan
    readonly arrivals: ReadonlyArray<Receiver.Arrival>
  }>
  readonly registrations: ReadonlyArray<RegistrationFacts>
  /** Push jobs by `<registration id>/<seq>`. */
  readonly jobsByKey: ReadonlyMap<string, ReadonlyArray<PushJob>>
}

const accepted = (status: number) => status >= 200 && status < 300

const nextBefore = (before: Before, status: number) =>
  before !== undefined && before > 0 ? before : accepted(status) ? 1 : -status

const muted = (mutes: ReadonlyArray<World.Mute>, e: LoggedEvent) =>
  mutes.some((m) => (m.space === undefined || m.space === e.space) && (m.type === undefined || m.type === e.type))

const subscriptionFacts = (
  s: Tenants.Subscription,
  rows: ReadonlyArray<DeliveryRow>,
  arrivals: ReadonlyArray<Receiver.Arrival>,
  byKey: ReadonlyMap<string, LoggedEvent>,
  live: ReadonlyArray<LoggedEvent>,
): SubscriptionFacts => {
  const { plan } = s
  const matches = (e: LoggedEvent) =>
    e.key !== null &&
    e.seq > s.startedSeq &&
    plan.scope.includes(e.space) &&
    (plan.eventTypes.length === 0 || plan.eventTypes.includes(e.type))
  const seen = new Map<string, number>()
  const acceptedIds = new Map<string, Set<string>>()
  const received: Array<Received> = []
  for (const a of arrivals) {
    if (!a.verified) continue
    const found = byKey.get(a.key)
    const event = found !== undefined && matches(found) ? found : undefined
    const before = event === undefined ? undefined : seen.get(a.webhookId)
    received.push({ arrival: a, event, before })
    if (event === undefined) continue
    seen.set(a.webhookId, nextBefore(before, a.status))
    if (accepted(a.status)) acceptedIds.set(a.key, (acceptedIds.get(a.key) ?? new Set()).add(a.webhookId))
  }
  const rowOf = new Map(rows.map((r) => [r.seq, r]))
  const owed = live.filter(matches).map((event): Owed => {
    const row = rowOf.get(event.seq)
    const fate =
      row === undefined
        ? "no row"
        : row.state === "dead" && row.reason === "permission"
          ? "denied"
          : acceptedIds.has(event.key!)
            ? "accepted"
            : "unaccepted"
    return { event, row, fate }
  })
  return { plan, rows, arrivals, received, matches, acceptedIds, owed }
}

/**
 * Whether a push job's errors say `registration` was denied: a batch's reason names its dead
 * registrations (the first few; "and n more" past them), each as `registration ID: WHY`. A job that
 * went on after an attempt (others of its batch to retry) and completed names it in that attempt's
 * error; only a cancelled one's last reason may leave it unnamed.
 */
export const deniedIn = (job: Pick<PushJob, "state" | "errors">, registration: string) => {
  const text = JSON.stringify(job.errors)
  if (!text.includes("lacks")) return false
  const named = new RegExp(`registration ${registration}: [^;"]* lacks `).test(text)
  if (job.state !== "cancelled") return named
  return named || !/registration \d+: /.test(text) || / and \d+ more/.test(text)
}

const registrationFacts = (
  r: Tenants.Registration,
  run: Run,
  ledger: Pick<Ledger, "bySeq" | "live" | "jobsByKey" | "recorded">,
): RegistrationFacts => {
  const plan = run.world.principals.find((p) => p.principal === r.principal)!
  const doomed = r.name === run.world.doomed
  const arrivals = run.push.arrivals.filter((a) => a.registration === r.name)
  const goneAt = arrivals.find((a) => a.status === 410)?.at
  const seen = new Map<string, number>()
  const received = arrivals.map((a): PushReceived => {
    const before = seen.get(a.id)
    seen.set(a.id, nextBefore(before, a.status))
    return { arrival: a, event: ledger.bySeq.get(BigInt(a.id.split(".")[1] ?? "0")), before }
  })
  const acceptedIds = new Set(arrivals.filter((a) => accepted(a.status)).map((a) => a.id))
  const hears = (e: LoggedEvent) => plan.spaces.includes(e.space) && e.actor !== plan.principal && !muted(plan.mutes, e)
  const owed = ledger.live.filter(hears).map((event): PushOwed => {
    const [job] = ledger.jobsByKey.get(`${r.id}/${event.seq}`) ?? []
    if (acceptedIds.has(`${event.epoch}.${event.seq}`)) return { event, job, fate: "accepted" }
    const finalized = job?.finalized?.getTime()
    // The doomed registration is removed at its 410: what was not finished before is owed no more.
    const gone = doomed && goneAt !== undefined && (job === undefined || finalized === undefined || finalized >= goneAt)
    if (gone) return { event, job, fate: "gone" }
    if (job === undefined) return { event, job, fate: "no job" }
    const denied = deniedIn(job, r.id)
    return { event, job, fate: denied ? "denied" : "unaccepted" }
  })
  return {
    registration: r,
    plan,
    doomed,
    received,
    goneAt,
    removedAt: doomed ? run.history.pushRemovedAt : undefined,
    hears,
    owed,
    jobs: ledger.recorded.jobs.filter((j) => j.registration === r.id),
  }
}

export const make = (run: Run, recorded: Recorded): Ledger => {
  const { events } = recorded
  const bySeq = new Map(events.map((e) => [e.seq, e]))
  const byKey = new Map<string, LoggedEvent>()
  let keysLoggedTwice = 0
  for (const e of events) {
    if (e.key === null) continue
    if (byKey.has(e.key)) keysLoggedTwice++
    byKey.set(e.key, e)
  }
  const live = events.filter((e) => e.key !== null)
  const rowsBySub = Map.groupBy(recorded.deliveries, (d) => d.sub)
  const arrivalsByPath = Map.groupBy(run.receiver.arrivals, (a) => a.path)
  const arrivalsOf = (plan: World.SubscriptionPlan) => arrivalsByPath.get(run.receiver.pathOf(plan.name)) ?? []
  const jobsByKey = Map.groupBy(recorded.jobs, (j) => `${j.registration}/${j.seq}`)
  const partial = { bySeq, live, jobsByKey, recorded }
  return {
    run,
    recorded,
    options: run.options ?? defaults,
    bySeq,
    byKey,
    keysLoggedTwice,
    live,
    subscriptions: run.tenants.subscriptions
      .filter((s) => !s.plan.gap)
      .map((s) => subscriptionFacts(s, rowsBySub.get(s.id) ?? [], arrivalsOf(s.plan), byKey, live)),
    gapSubscriptions: run.tenants.subscriptions
      .filter((s) => s.plan.gap)
      .map((s) => ({ plan: s.plan, arrivals: arrivalsOf(s.plan) })),
    registrations: run.tenants.registrations.map((r) => registrationFacts(r, run, partial)),
    jobsByKey,
  }
}
