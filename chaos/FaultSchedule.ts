/**
 * The faults of a chaos run, drawn from the seed before anything starts and printed, so a failing
 * run can be replayed with the same `--seed` (and the same `--events`, `--kills`, rate and
 * duration, which set how many faults there are and when). Times are offsets from the start of
 * production. What a fault hits at run time (which backend pids exist, say) is picked by the
 * schedule's own numbers, never by the clock.
 *
 * Kinds: SIGKILL and SIGTERM of a worker (and its restart), `pg_terminate_backend` of bothy
 * connections, a restart of PostgreSQL, a grant revoked and restored, a subscription disabled and
 * re-enabled, receiver faults (500, 429 with Retry-After, hang) on a subscription or a
 * registration, a 410 from a webhook receiver (disabled `gone`, then re-enabled) and from the push
 * service (the registration removed), and the old partitions detached by retention while both
 * consumers are held behind them (the `retention-gap`).
 */
import type * as SeededRandom from "./SeededRandom.ts"
import * as World from "./World.ts"

export type ReceiverAnswer = 500 | 429 | "hang"

export type Fault =
  | { readonly kind: "sigkill"; readonly at: number; readonly worker: number; readonly restartAfter: number }
  | { readonly kind: "sigterm"; readonly at: number; readonly worker: number; readonly restartAfter: number }
  | { readonly kind: "terminate-backends"; readonly at: number; readonly count: number; readonly pick: number }
  | { readonly kind: "pg-restart"; readonly at: number; readonly down: number }
  | {
      readonly kind: "revoke"
      readonly at: number
      readonly grant: World.Grant
      readonly restoreAfter: number
    }
  | { readonly kind: "disable"; readonly at: number; readonly subscription: string; readonly enableAfter: number }
  | {
      readonly kind: "webhook-answer"
      readonly at: number
      readonly subscription: string
      readonly answer: ReceiverAnswer
      readonly count: number
    }
  | { readonly kind: "webhook-gone"; readonly at: number; readonly subscription: string }
  | {
      readonly kind: "push-answer"
      readonly at: number
      readonly registration: string
      readonly answer: ReceiverAnswer
      readonly count: number
    }
  | { readonly kind: "push-gone"; readonly at: number; readonly registration: string }
  | { readonly kind: "retention-gap"; readonly at: number }

export type Kind = Fault["kind"]

export interface Options {
  readonly productionMillis: number
  readonly kills: number
  readonly workers: number
  /** A run too short for the waits a 429 or a hang costs a webhook (60 s at least): 500s only. */
  readonly quick: boolean
}

export const make = (random: SeededRandom.SeededRandom, world: World.World, options: Options): Array<Fault> => {
  const p = options.productionMillis
  const k = options.kills
  const within = (from: number, to: number) => Math.round(p * (from + random.next() * (to - from)))
  const span = (min: number, max: number) => random.int(min, max)
  const faults: Array<Fault> = [{ kind: "retention-gap", at: Math.round(p * 0.12) }]
  const live = world.subscriptions.filter((s) => !s.gap).map((s) => s.name)
  const [gone, ...others] = random.sample(live, live.length)
  const stops = [
    { kind: "sigkill", n: k, restart: [500, 4000] },
    { kind: "sigterm", n: Math.max(1, Math.round(k / 4)), restart: [1000, 5000] },
  ] as const
  for (const { kind, n, restart } of stops)
    for (let i = 0; i < n; i++)
      faults.push({
        kind,
        at: within(0.05, 0.85),
        worker: random.int(0, options.workers - 1),
        restartAfter: span(restart[0], restart[1]),
      })
  for (let i = 0; i < Math.max(2, Math.round(k / 2)); i++)
    faults.push({
      kind: "terminate-backends",
      at: within(0.05, 0.85),
      count: random.int(1, 3),
      pick: random.int(0, 1e6),
    })
  for (let i = 0; i < 1 + Math.floor(k / 10); i++)
    faults.push({ kind: "pg-restart", at: within(0.3, 0.85), down: span(1000, 4000) })
  const restoreSpan = options.quick ? [15000, 25000] : [30000, 60000]
  // As many push rights as webhook rights: each kind of delivery must meet a revoke.
  const revokes = Math.max(2, Math.round(k / 2))
  const picked = [
    ...random.sample(
      world.grants.filter((g) => g.action === World.webhookAction),
      Math.ceil(revokes / 2),
    ),
    ...random.sample(
      world.grants.filter((g) => g.action === World.pushAction),
      Math.floor(revokes / 2),
    ),
  ]
  for (const grant of picked)
    faults.push({ kind: "revoke", at: within(0.05, 0.7), grant, restoreAfter: span(restoreSpan[0]!, restoreSpan[1]!) })
  for (const subscription of others.slice(0, Math.max(1, Math.round(k / 4))))
    faults.push({ kind: "disable", at: within(0.05, 0.75), subscription, enableAfter: span(3000, 15000) })
  const answers: ReadonlyArray<ReceiverAnswer> = options.quick ? [500] : [500, 500, 429, "hang"]
  // A quick run gives each failing answer to a subscription of its own, never the 410's: a second
  // failure in a row waits 5 minutes (WebhookSchedule), longer than the run.
  const failing = random.sample(others, others.length)
  for (let i = 0; i < Math.max(3, k); i++)
    faults.push({
      kind: "webhook-answer",
      at: within(0.05, 0.85),
      subscription: options.quick ? failing[i % failing.length]! : random.pick(live),
      answer: random.pick(answers),
      count: 1,
    })
  faults.push({ kind: "webhook-gone", at: within(0.2, 0.6), subscription: gone! })
  const registrations = world.principals.flatMap((pr) => pr.registrations).filter((r) => r !== world.doomed)
  const pushAnswers: ReadonlyArray<ReceiverAnswer> = options.quick ? [500, 429] : [500, 429, "hang"]
  for (let i = 0; i < Math.max(2, Math.round(k / 2)); i++)
    faults.push({
      kind: "push-answer",
      at: within(0.05, 0.85),
      registration: random.pick(registrations),
      answer: random.pick(pushAnswers),
      count: random.int(1, 3),
    })
  faults.push({ kind: "push-gone", at: within(0.3, 0.7), registration: world.doomed })
  return faults.sort((a, b) => a.at - b.at || a.kind.localeCompare(b.kind))
}

const seconds = (ms: number) => `${(ms / 1000).toFixed(3)}s`

export const describe = (f: Fault): string => {
  const at = `+${seconds(f.at).padStart(9)}`
  switch (f.kind) {
    case "sigkill":
    case "sigterm":
      return `${at} ${f.kind} worker ${f.worker}, started again after ${seconds(f.restartAfter)}`
    case "terminate-backends":
      return `${at} pg_terminate_backend of ${f.count} bothy connection(s) (pick ${f.pick})`
    case "pg-restart":
      return `${at} PostgreSQL restart, down for ${seconds(f.down)}`
    case "revoke":
      return `${at} revoke ${f.grant.action} of ${f.grant.principal} on ${f.grant.space}, restored after ${seconds(f.restoreAfter)}`
    case "disable":
      return `${at} disable subscription ${f.subscription}, enabled again from its start after ${seconds(f.enableAfter)}`
    case "webhook-answer":
      return `${at} webhook receiver answers ${f.answer} to the next ${f.count} request(s) of ${f.subscription}`
    case "webhook-gone":
      return `${at} webhook receiver answers 410 to ${f.subscription} (disabled gone, then enabled again from its start)`
    case "push-answer":
      return `${at} push service answers ${f.answer} to the next ${f.count} message(s) of ${f.registration}`
    case "push-gone":
      return `${at} push service answers 410 to ${f.registration} (its registration must go)`
    case "retention-gap":
      return `${at} retention detaches the old partitions while both consumers are held behind them, then lets them go on`
  }
}

/** The schedule as printed at the start of a run. */
export const text = (seed: number, faults: ReadonlyArray<Fault>) =>
  [`fault schedule (seed ${seed}, ${faults.length} faults):`, ...faults.map(describe)].join("\n")

export const countByKind = (faults: ReadonlyArray<{ readonly kind: Kind }>) => {
  const counts: Record<string, number> = {}
  for (const f of faults) counts[f.kind] = (counts[f.kind] ?? 0) + 1
  return counts
}
