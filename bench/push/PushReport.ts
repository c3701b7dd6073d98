/**
 * The push benchmark's report: medians over the runs that passed their check (a run that failed
 * has no figure, and its targets are not met), the targets, the table, and the conditions each
 * figure was measured under, so that a number read later in `results/push.json` can be judged
 * without rerunning it.
 */
import type { Effect } from "effect"
import { defaults as pushDefaults } from "../../src/push/PushConfig.ts"
import { packageVersion, round3 } from "../harness/Figures.ts"
import type * as Handoff from "../harness/Handoff.ts"
import type { Report, Target } from "../harness/Report.ts"
import * as Throughput from "../harness/Throughput.ts"
import * as PushBurst from "./PushBurst.ts"
import type * as PushHandoff from "./PushHandoff.ts"

/** What `push.ts` reads from the environment. */
export interface Settings {
  readonly smoke: boolean
  readonly rate: number
  readonly seconds: number
  readonly warmupSeconds: number
  readonly spaces: number
  readonly members: number
  readonly fanOutMembers: number
}

/** The settings resolved: which parts run, at which sizes, and why a run is a smoke run. */
export interface Plan {
  readonly config: Settings
  readonly parts: ReadonlySet<string>
  readonly repeats: number
  readonly cooldownMs: number
  readonly compareCooldownMs: number | undefined
  readonly p95Target: number
  readonly p95TargetVariable: string
  readonly smokeReasons: ReadonlyArray<string>
  /** The rates of the low-rate handoff part (none when it does not run). */
  readonly lowRates: ReadonlyArray<number>
  readonly handoff: PushHandoff.PushHandoffConfig
  readonly baseline: Omit<Handoff.HandoffConfig, "event" | "fanOut">
  readonly burst: Omit<PushBurst.PushBurstConfig, "signEach">
}

type Repeated<A> = A & { readonly repeat: number }

/** A handoff run at one of the low rates. */
export type LowRateRun = Repeated<PushHandoff.PushHandoffResult> & { readonly rate: number }

/** Every run of every part, in the order they ran. */
export interface Runs {
  readonly ours: ReadonlyArray<Repeated<PushHandoff.PushHandoffResult>>
  readonly compared: ReadonlyArray<Repeated<PushHandoff.PushHandoffResult>>
  readonly baselines: ReadonlyArray<Repeated<Handoff.HandoffResult>>
  readonly lowRates: ReadonlyArray<LowRateRun>
  readonly bursts: ReadonlyArray<Repeated<PushBurst.PushBurstResult>>
  readonly pieces: Effect.Success<ReturnType<typeof PushBurst.pieces>> | undefined
}

export const flatSlopeShare = 0.01
const pushBatchSize = pushDefaults.batchSize
const arrivedP95Target = 100
const claimableAimMs = 10
const pushesPerSecondTarget = 2500
/** The worker's and its backends' CPU per push, in the fan-out. */
const cpuPerPushTargetMs = 0.4

export const fixed = (n: number | undefined, digits = 1) =>
  n !== undefined && Number.isFinite(n) ? n.toFixed(digits) : "n/a"
const median = (values: ReadonlyArray<number>) => (values.length === 0 ? Number.NaN : round3(Throughput.median(values)))

type Quantiles = { readonly p50: number; readonly p95: number; readonly p99: number }
const medianQuantiles = (ds: ReadonlyArray<Quantiles | undefined>): Quantiles => {
  const kept = ds.filter((d): d is Quantiles => d !== undefined)
  return {
    p50: median(kept.map((d) => d.p50)),
    p95: median(kept.map((d) => d.p95)),
    p99: median(kept.map((d) => d.p99)),
  }
}

const allPassed = (runs: ReadonlyArray<{ readonly check: { readonly passed: boolean } }>) =>
  runs.length > 0 && runs.every((r) => r.check.passed)

/** The handoff's medians, over the runs that passed their check. */
const handoffFigures = (plan: Plan, runs: Runs) => {
  const { ours, compared, baselines } = runs
  const passedOurs = ours.filter((r) => r.check.passed)
  const passedCompared = compared.filter((r) => r.check.passed)
  return {
    passedOurs,
    passedCompared,
    claimable: medianQuantiles(passedOurs.map((r) => r.jobClaimableMs)),
    arrived: medianQuantiles(passedOurs.map((r) => r.arrivedMs)),
    claimableAtNotify: medianQuantiles(
      passedOurs.map((r) => (typeof r.jobClaimableAtNotifyMs === "string" ? undefined : r.jobClaimableAtNotifyMs)),
    ),
    claimableCompared: medianQuantiles(passedCompared.map((r) => r.jobClaimableMs)),
    arrivedCompared: medianQuantiles(passedCompared.map((r) => r.arrivedMs)),
    baselineLatency: medianQuantiles(baselines.map((r) => r.latencyMs)),
    flatRuns: ours.filter((r) => r.backlog.flat).length,
    rateHeldRuns: ours.filter((r) => r.achievedEventsPerSecond >= 0.95 * plan.config.rate).length,
  }
}
type HandoffFigures = ReturnType<typeof handoffFigures>

const burstsOf = (runs: Runs, signEach: boolean) => runs.bursts.filter((b) => b.signEach === signEach && b.check.passed)
const burstMedian = (
  runs: ReadonlyArray<PushBurst.PushBurstResult>,
  f: (r: PushBurst.PushBurstResult) => number | undefined,
) => median(runs.map(f).filter((v): v is number => v !== undefined))

/** The fan-out's medians, reused token and `signEach`, over the runs that passed their check. */
const fanOutFigures = (runs: Runs) => {
  if (runs.bursts.length === 0) return undefined
  const of = (bursts: ReadonlyArray<PushBurst.PushBurstResult>) => ({
    pushesPerSecond: burstMedian(bursts, (r) => r.pushesPerSecond),
    senderMsPerPush: burstMedian(bursts, (r) => r.cpu.senderMsPerPush),
    serverMsPerPush: burstMedian(bursts, (r) => r.cpu.serverMsPerPush),
    commitToJobsClaimableMs: burstMedian(bursts, (r) => r.commitToJobsClaimableMs),
  })
  return { reused: of(burstsOf(runs, false)), signEach: of(burstsOf(runs, true)) }
}
type FanOutFigures = NonNullable<ReturnType<typeof fanOutFigures>>

const target = (name: string, value: number | boolean, goal: number | boolean, met: boolean): Target => ({
  name,
  value: typeof value === "number" ? round3(value) : value,
  target: goal,
  met,
})

const handoffTargets = (plan: Plan, runs: Runs, h: HandoffFigures): Array<Target> => {
  const { p95Target, p95TargetVariable } = plan
  const checked = allPassed(runs.ours)
  const n = runs.ours.length
  return [
    target("every handoff run passed its check (exactly once, decrypted)", checked, true, checked),
    target(
      `(a) commit to push job claimable p95 <= ${p95Target} ms (${p95TargetVariable})`,
      h.claimable.p95,
      p95Target,
      checked && h.claimable.p95 <= p95Target,
    ),
    target(
      `(a) commit to push job claimable p95 <= ${claimableAimMs} ms (aim)`,
      h.claimable.p95,
      claimableAimMs,
      checked && h.claimable.p95 <= claimableAimMs,
    ),
    target(
      `(b) commit to message received p95 <= ${arrivedP95Target} ms`,
      h.arrived.p95,
      arrivedP95Target,
      checked && h.arrived.p95 <= arrivedP95Target,
    ),
    target("backlog flat (pending push jobs, cursor lag) in every run", h.flatRuns, n, h.flatRuns === n),
    target(`producer held >= 95% of ${plan.config.rate} events/s (runs)`, h.rateHeldRuns, n, h.rateHeldRuns === n),
  ]
}

/** (a) at each low rate: the median of its runs' p95 over the runs that passed, and every repeat. */
const lowRateFigures = (plan: Plan, runs: Runs) =>
  plan.lowRates.map((rate) => {
    const at = runs.lowRates.filter((r) => r.rate === rate)
    const passed = at.filter((r) => r.check.passed)
    return {
      rate,
      checked: allPassed(at),
      claimable: medianQuantiles(passed.map((r) => r.jobClaimableMs)),
      arrived: medianQuantiles(passed.map((r) => r.arrivedMs)),
      p95Repeats: at.map((r) => r.jobClaimableMs?.p95),
      rateHeldRuns: at.filter((r) => r.achievedEventsPerSecond >= 0.95 * rate).length,
      runs: at.length,
    }
  })
type LowRateFigures = ReturnType<typeof lowRateFigures>

const lowRateTargets = (low: LowRateFigures): Array<Target> =>
  low.map((l) =>
    target(
      `(a) commit to push job claimable p95 <= ${claimableAimMs} ms at ${l.rate} events/s`,
      l.claimable.p95,
      claimableAimMs,
      l.checked && l.claimable.p95 <= claimableAimMs,
    ),
  )

const lowRateRows = (low: LowRateFigures): Array<Row> =>
  low.flatMap((l) => [
    [
      "(a) job claimable",
      `p95 at ${l.rate} events/s (repeats ${l.p95Repeats.map((v) => fixed(v, 2)).join(", ")})`,
      "ms",
      fixed(l.claimable.p95, 2),
      "",
      "",
      `<= ${claimableAimMs}`,
    ],
    [
      "(b) message received",
      `p95 at ${l.rate} events/s`,
      "ms",
      fixed(l.arrived.p95, 2),
      "",
      "",
      `${l.checked ? "checked" : "CHECK FAILED"}, ${l.rateHeldRuns}/${l.runs} held the rate`,
    ],
  ])

const fanOutCpuPerPush = (fanOut: FanOutFigures) => fanOut.reused.senderMsPerPush + fanOut.reused.serverMsPerPush

const fanOutTargets = (runs: Runs, fanOut: FanOutFigures): Array<Target> => {
  const checked = allPassed(runs.bursts)
  return [
    target(
      "every fan-out run passed its check (exactly once by Topic; the seeded sample decrypted)",
      checked,
      true,
      checked,
    ),
    target(
      `fan-out >= ${pushesPerSecondTarget} pushes/s (reused token)`,
      fanOut.reused.pushesPerSecond,
      pushesPerSecondTarget,
      checked && fanOut.reused.pushesPerSecond >= pushesPerSecondTarget,
    ),
    target(
      `CPU per push <= ${cpuPerPushTargetMs} ms (fan-out, reused token: sender and PostgreSQL)`,
      fanOutCpuPerPush(fanOut),
      cpuPerPushTargetMs,
      checked && fanOutCpuPerPush(fanOut) <= cpuPerPushTargetMs,
    ),
  ]
}

type Row = ReadonlyArray<string>

const vs = (value: number, base: number) =>
  Number.isFinite(base) ? [fixed(base, 2), `${fixed(value / base, 2)}x`] : ["", ""]
const quantileRows = (
  measure: string,
  what: string,
  q: Quantiles,
  base: Quantiles | undefined,
  goal: (k: string) => string,
): Array<Row> =>
  (["p50", "p95", "p99"] as const).map((k) => [
    measure,
    `${k}, ${what}`,
    "ms",
    fixed(q[k], 2),
    ...(base === undefined ? ["", ""] : vs(q[k], base[k])),
    goal(k),
  ])

/** (a) and (b) at the cooldown `bothy worker` gives, the diagnostics, and the compared cooldown. */
const latencyRows = (plan: Plan, runs: Runs, h: HandoffFigures): Array<Row> => {
  const { cooldownMs, compareCooldownMs, p95Target } = plan
  return [
    ...quantileRows(
      "(a) job claimable",
      `commit to round commit, cooldown ${cooldownMs} ms`,
      h.claimable,
      h.baselineLatency,
      (k) => (k === "p95" ? `<= ${p95Target} (aim <= ${claimableAimMs})` : ""),
    ),
    ...quantileRows(
      "(b) message received",
      `commit to decrypted at the push service, cooldown ${cooldownMs} ms`,
      h.arrived,
      undefined,
      (k) => (k === "p95" ? `<= ${arrivedP95Target}` : ""),
    ),
    ...quantileRows(
      "diag: (a) at the database",
      "commit to the round's NOTIFY at a listener on its own thread",
      h.claimableAtNotify,
      undefined,
      () => "diagnostic",
    ),
    [
      "diag: event loop",
      "worker thread's timer delay while producing, p50 / p99 / max",
      "ms",
      (["p50", "p99", "max"] as const)
        .map((k) => fixed(median(runs.ours.map((r) => r.eventLoopDelayMs[k]))))
        .join(" / "),
      "",
      "",
      "diagnostic",
    ],
    ...(compareCooldownMs === undefined
      ? []
      : [
          ...quantileRows(
            "(a) job claimable",
            `cooldown ${compareCooldownMs} ms`,
            h.claimableCompared,
            h.baselineLatency,
            () => "compare",
          ),
          ...quantileRows(
            "(b) message received",
            `cooldown ${compareCooldownMs} ms`,
            h.arrivedCompared,
            undefined,
            () => "compare",
          ),
        ]),
  ]
}

/** Throughput, backlog, the check, where the time goes, and the CPU of the handoff runs. */
const handoffRunRows = (plan: Plan, runs: Runs, h: HandoffFigures): Array<Row> => {
  const { config } = plan
  const { ours, compared } = runs
  const passed = h.passedOurs
  const cores = (f: (r: PushHandoff.PushHandoffResult) => number) => fixed(median(ours.map(f)), 2)
  return [
    [
      "handoff",
      `${config.rate} events/s x ${config.members} registrations`,
      "pushes/s",
      fixed(median(ours.map((r) => r.pushesPerSecond))),
      "",
      "",
      `${h.rateHeldRuns}/${ours.length} runs held the rate`,
    ],
    [
      "backlog",
      "pending push jobs slope",
      "per s",
      fixed(median(ours.map((r) => r.backlog.pendingJobs.slopePerSecond)), 2),
      "",
      "",
      `${h.flatRuns}/${ours.length} flat (<= ${flatSlopeShare * config.rate * Math.ceil(config.members / pushBatchSize)} jobs/s)`,
    ],
    [
      "check",
      "runs with every message exactly once, decrypted",
      "runs",
      `${passed.length}/${ours.length}`,
      "",
      "",
      plan.compareCooldownMs === undefined ? "" : `compare ${h.passedCompared.length}/${compared.length}`,
    ],
    ...(["roundEndToJobStart", "jobStartToSend", "build", "jobStartToArrival"] as const).map((k) => [
      "breakdown",
      k,
      "ms p50 / p95",
      `${fixed(median(passed.map((r) => r.breakdownMs[k].p50)), 2)} / ${fixed(median(passed.map((r) => r.breakdownMs[k].p95)), 2)}`,
      "",
      "",
      "",
    ]),
    [
      "cpu",
      "while producing: worker / push service / server",
      "cores",
      `${cores((r) => r.cpu.workerCores)} / ${cores((r) => r.cpu.pushServiceCores)} / ${cores((r) => r.cpu.serverCores)}`,
      "",
      "",
      `machine ${fixed(median(ours.map((r) => r.cpu.machineBusy * 100)), 0)}% busy`,
    ],
  ]
}

const fanOutRows = (plan: Plan, runs: Runs, fanOut: FanOutFigures): Array<Row> => {
  const { pieces } = runs
  return [
    [
      "fan-out",
      `1 event x ${plan.config.fanOutMembers} registrations, reused token`,
      "pushes/s",
      fixed(fanOut.reused.pushesPerSecond),
      ...vs(fanOut.reused.pushesPerSecond, fanOut.signEach.pushesPerSecond),
      `>= ${pushesPerSecondTarget}`,
    ],
    [
      "fan-out cpu",
      "sender (this process) per push, reused token",
      "ms",
      fixed(fanOut.reused.senderMsPerPush, 3),
      ...vs(fanOut.reused.senderMsPerPush, fanOut.signEach.senderMsPerPush),
      "baseline: signEach",
    ],
    [
      "fan-out cpu",
      "PostgreSQL per push, reused token",
      "ms",
      fixed(fanOut.reused.serverMsPerPush, 3),
      ...vs(fanOut.reused.serverMsPerPush, fanOut.signEach.serverMsPerPush),
      "",
    ],
    [
      "fan-out cpu",
      "sender and PostgreSQL per push, reused token",
      "ms",
      fixed(fanOutCpuPerPush(fanOut), 3),
      ...vs(fanOutCpuPerPush(fanOut), fanOut.signEach.senderMsPerPush + fanOut.signEach.serverMsPerPush),
      `<= ${cpuPerPushTargetMs}`,
    ],
    ["fan-out", "commit to all jobs claimable", "ms", fixed(fanOut.reused.commitToJobsClaimableMs), "", "", ""],
    [
      "diag: fan-out",
      "commit to the round's NOTIFY at a listener (database commit)",
      "ms",
      fixed(burstMedian(burstsOf(runs, false), (r) => r.commitToJobsNotifiedMs)),
      "",
      "",
      "",
    ],
    ...(pieces === undefined
      ? []
      : [
          ["fan-out cpu", "sign one VAPID token", "µs", fixed(pieces.signTokenMicros), "", "", "per call, alone"],
          [
            "fan-out cpu",
            "build one request (encrypt)",
            "µs",
            fixed(pieces.buildRequestMicros),
            "",
            "",
            "per call, alone",
          ],
        ]),
  ]
}

/** What every figure was measured under. */
const conditions = (plan: Plan) => {
  const { config, smokeReasons } = plan
  return {
    smoke: smokeReasons.length > 0,
    ...(smokeReasons.length > 0
      ? {
          smokeNote: `a smoke run (${smokeReasons.join(", ")}) on a loaded, shared machine: it proves the benchmark works, its figures are not the full-size ones`,
        }
      : {}),
    parts: [...plan.parts],
    repeats: plan.repeats,
    handoff: {
      ...plan.handoff,
      pollInterval: "1 second",
      compareCooldownMs: plan.compareCooldownMs,
      audience: `${config.spaces} spaces bench-k, ${config.members} members each (member-k-j), each with push.deliver on its space (PermissionGrants) and one registration (PushRegistrations.register); event i is in space bench-(i mod spaces), actor user:… (never a member), no mutes: every event reaches exactly ${config.members} registrations`,
      producer:
        "ProducerThread: a worker thread of its own with its own pool, one fiber ticking every 1/rate s, forking each append (EventLog.append of one event, autocommitted) at its due time without waiting for the previous one",
      warmup: `the first ${config.warmupSeconds} s of each run are produced at the same rate and left out of the figures`,
      workerSide:
        "one @effect/sql-pg pool (workerConnections) shared by PushFanOut.layer (batch 500 events, poll 1 s, cooldown as stated; the one-statement round over the default audience, one push.batch job per event and push.batch_size registrations) and JobWorker.layer (queue push, concurrency as stated, PushDelivery.makeWith: the batch kind, token reused per origin), plus NotificationStream's LISTEN connection, as bothy worker composes them",
      pushService:
        "BenchPushService on a worker thread of this process, plain HTTP on 127.0.0.1 with keep-alive: checks each VAPID token (ES256 signature once per distinct token, aud/exp/sub on every message), Content-Encoding and TTL, decrypts (RFC 8291, src/demo/WebPushBrowser.ts) with the browser keys it generated, reads the envelope's event id, answers 201",
      stamps:
        "performance.now(): commit = the append returned on the producer thread; (a) = the Consumer.round span carrying the event ended in the worker (its statement committed: the jobs are claimable; what Handoff.ts measures with onRound); diagnostic (a) at the database = the k-th pg_notify('jobs', 'push') reaching a plain pg LISTEN connection on the push service's thread, k the round's index (rounds serialize and each notifies once), free of the worker's event-loop delay; (b) = the push service's request callback (headers arrived); across threads as performance.timeOrigin + performance.now()",
      backlogSampling:
        "every 1 s from the production start: push jobs not final (available, scheduled, running, retryable) and event_log head - push cursor",
      flatCriterion: `least-squares slope over the measured window <= ${flatSlopeShare * 100}% of the offered rate`,
      betweenRuns:
        "TRUNCATE jobs; push cursor to the head; VACUUM ANALYZE of jobs, cursors, registrations, members, grants, preferences; CHECKPOINT",
    },
    fanOut: {
      ...plan.burst,
      members: config.fanOutMembers,
      space: PushBurst.space,
      audience:
        "one space, every member with push.deliver there and one registration; the event's actor is not a member",
      modes:
        "reused: PushDelivery.makeWith({}) (one VAPID token per push-service origin, as bothy worker runs it); signEach: PushDelivery.makeWith({ tokens: { signEach: true } }); alternating which goes first per repeat",
      pushesPerSecond:
        "pushes (messages the push service received, one per registration) / (last message received - the append returned)",
      jobs: `the round makes one push.batch job per push.batch_size (${pushBatchSize}) registrations of the event; a job sends to its registrations concurrently, at most push.max_in_flight requests in flight`,
      cpu: "CpuUsage from just before the append until every job is final: this process's CPU time (all threads) minus the push service thread's (process.threadCpuUsage), and the server's processes; per push",
      pieces:
        "PushVapid.makeTokenCache({ signEach: true }).authorization and PushRequest.build of the same envelope, 2,000 calls each, this thread's CPU per call, nothing else running in the process",
    },
    baselineHandoff: {
      ...plan.baseline,
      what: "Handoff.ts: the generic Consumer.layer (no cooldown) with a trivial fan-out (receivers jobs per event, no audience or registrations), its own cursor, a producer fiber in this process; commit to the round that created the jobs returning",
    },
    drivers: {
      ours: `@effect/sql-pg ${packageVersion("@effect/sql-pg")}, effect ${packageVersion("effect")}, undici ${packageVersion("undici")}, web-push ${packageVersion("web-push")}`,
    },
  }
}

const results = (
  plan: Plan,
  runs: Runs,
  h: HandoffFigures | undefined,
  low: LowRateFigures,
  fanOut: FanOutFigures | undefined,
) => ({
  lowRates: low.length === 0 ? undefined : { median: low, runs: runs.lowRates },
  handoff:
    h === undefined || runs.ours.length === 0
      ? undefined
      : {
          median: { jobClaimableMs: h.claimable, arrivedMs: h.arrived },
          passedRuns: h.passedOurs.length,
          flatRuns: h.flatRuns,
          rateHeldRuns: h.rateHeldRuns,
          runs: runs.ours,
        },
  handoffCompare:
    h === undefined || runs.compared.length === 0
      ? undefined
      : {
          note: `the same run with the push consumer's cooldown at ${plan.compareCooldownMs} ms instead of ${plan.cooldownMs} ms`,
          median: { jobClaimableMs: h.claimableCompared, arrivedMs: h.arrivedCompared },
          passedRuns: h.passedCompared.length,
          runs: runs.compared,
        },
  fanOut: fanOut === undefined ? undefined : { median: fanOut, pieces: runs.pieces, runs: runs.bursts },
})

const baseline = (runs: Runs) => ({
  handoff:
    runs.baselines.length === 0
      ? "none (BENCH_PUSH_BASELINE=false)"
      : {
          note: "for (a): Handoff.ts's consumer handoff in the same repeats, same rate and receivers per event",
          median: medianQuantiles(runs.baselines.map((r) => r.latencyMs)),
          runs: runs.baselines,
        },
  fanOut: "signEach: the same fan-out with a VAPID token signed for every request, in the same repeats",
})

/** The report of a run: medians over the runs that passed, the targets, the table, the conditions. */
export const report = (plan: Plan, runs: Runs): Report => {
  const handoff = plan.parts.has("handoff") ? handoffFigures(plan, runs) : undefined
  const fanOut = fanOutFigures(runs)
  const low = lowRateFigures(plan, runs)
  return {
    conditions: conditions(plan),
    results: results(plan, runs, handoff, low, fanOut),
    baseline: baseline(runs),
    targets: [
      ...(handoff === undefined ? [] : handoffTargets(plan, runs, handoff)),
      ...lowRateTargets(low),
      ...(fanOut === undefined ? [] : fanOutTargets(runs, fanOut)),
    ],
    table: {
      columns: ["measure", "case", "unit", "value", "baseline", "value/baseline", "target"],
      rows: [
        ...(handoff === undefined ? [] : [...latencyRows(plan, runs, handoff), ...handoffRunRows(plan, runs, handoff)]),
        ...lowRateRows(low),
        ...(fanOut === undefined ? [] : fanOutRows(plan, runs, fanOut)),
      ],
    },
  }
}
