/**
 * The `webhooks` consumer's round alone, with many subscriptions: `Consumer.makeRound` with
 * `WebhookFanOut.fanOut` drains a backlog back to back until caught up, with no job worker and
 * no receiver, so the figure is what the round can turn into deliveries and jobs.
 *
 *   setup (once):  N subscriptions through `WebhookSubscriptions.create`, subscription j covering
 *                  the one space `space-(j mod S)`, no type filter; then the backlog, event i in space
 *                  `space-(i mod S)`: each event matches N/S subscriptions (1% for 10,000 and 100)
 *   each run:      subscriptions as the case wants them -> cursor before the backlog -> drain -> check
 *
 * Cases, in a rotating order within each repeat:
 *   match     the N subscriptions: N/S deliveries per event, a job per subscription and round
 *   statement as match, with the round the worker runs: the whole round in one statement
 *             (`WebhookFanOut.roundOptions`); `match` is the transactional round it falls back
 *             to for a batch with lost events, split into phases from its spans
 *   none      no subscriptions at all: the pure round cost (the baseline)
 *   miss      the N subscriptions, their spaces renamed so no event matches (diagnostic: the cost of
 *             looking up an event's subscriptions among N, without creating anything)
 *
 * A run restores the subscriptions and their drain rows from a copy taken right after they were
 * created (same rows, no drainer), so every run starts from the same state without
 * creating them again. No drainer runs, so each round creates one job per subscription that got
 * deliveries in it.
 *
 * `explain` proves how matching finds subscriptions: `EXPLAIN (ANALYZE, FORMAT JSON)` of the
 * fan-out statement's `ev` and `matched` CTEs (`WebhookFanOut.matched`, the fragment the
 * fan-out itself runs), for a representative batch.
 */
import { Effect, Layer, Schema } from "effect"
import { SqlClient, type Statement } from "effect/sql"
import * as Consumer from "../../src/consumer/Consumer.ts"
import { Jobs } from "../../src/jobs/Jobs.ts"
import type { Event, NewEvent } from "../../src/log/Event.ts"
import { EventLog } from "../../src/log/EventLog.ts"
import { WebhookSubscriptions } from "../../src/webhooks/subscriptions/WebhookSubscriptions.ts"
import { WebhookConfig, type WebhookSettings } from "../../src/webhooks/WebhookConfig.ts"
import * as WebhookFanOut from "../../src/webhooks/WebhookFanOut.ts"
import { BenchServer } from "../harness/BenchServer.ts"
import { round3 } from "../harness/Figures.ts"
import * as RoundTrace from "../harness/RoundTrace.ts"
import * as Throughput from "../harness/Throughput.ts"

export const cases = ["match", "statement", "none", "miss"] as const
export type Case = (typeof cases)[number]

/** The cases whose events match the N subscriptions. */
const matching = (c: Case) => c === "match" || c === "statement"

export interface RoundsConfig {
  readonly subscriptions: number
  readonly spaces: number
  readonly backlog: number
  readonly batchSize: number
  readonly createConcurrency: number
  readonly webhookSettings: WebhookSettings
}

/** A run left deliveries, jobs or cursor other than the round promises; its figure is void. */
export class RoundsCheckFailed extends Schema.TaggedError<RoundsCheckFailed>()("RoundsCheckFailed", {
  case: Schema.String,
  detail: Schema.String,
}) {
  override get message() {
    return `after a ${this.case} drain, deliveries, jobs and cursor are not what the round promises: ${this.detail}`
  }
}

const spaceOf = (k: number) => `space-${String(k).padStart(3, "0")}`

const eventAt = (i: number, spaces: number): NewEvent => ({
  space: spaceOf(i % spaces),
  type: ["order.placed", "order.shipped", "invoice.paid"][i % 3]!,
  actor: `user:${i % 997}`,
  payload: { i, id: `ord_${(i * 7919).toString(16)}`, amount: 1000 + ((i * 3779) % 90000), note: "leave at the door" },
})

// What-if, not the statement bothy runs: the same typed arrays with a plain join, to show what the
// planner picks on its own for a batch (the reason for the LATERAL lookup with OFFSET 0).
const matchingPlainJoin = (sql: SqlClient.SqlClient, events: ReadonlyArray<Event>) => sql`
  WITH ev AS (
    SELECT * FROM ${WebhookFanOut.eventRows(sql, events)}
  )
  SELECT e.seq, e.epoch, s.id AS sub
  FROM ev AS e
  JOIN webhook_subscription_spaces AS ss ON ss.space_id = e.space
  JOIN webhook_subscriptions AS s ON s.id = ss.subscription_id
  WHERE s.state = 'active' AND e.seq > s.started_seq
    AND (cardinality(s.event_types) = 0 OR e.type = ANY (s.event_types))`

interface PlanNode {
  readonly "Node Type": string
  readonly "Relation Name"?: string
  readonly "Index Name"?: string
  readonly "Join Type"?: string
  readonly "Actual Rows"?: number
  readonly "Actual Loops"?: number
  readonly Plans?: ReadonlyArray<PlanNode>
}

const flatten = (node: PlanNode): Array<PlanNode> => [node, ...(node.Plans ?? []).flatMap(flatten)]

const subscriptionTables = new Set(["webhook_subscriptions", "webhook_subscription_spaces"])
const indexScans = new Set(["Index Scan", "Index Only Scan", "Bitmap Index Scan"])

/** How a plan reaches subscriptions: the index on spaces, and any sequential scan of their tables. */
export const judgePlan = (plan: { readonly Plan: PlanNode; readonly "Execution Time"?: number }) => {
  const nodes = flatten(plan.Plan)
  const usesSpacesIndex = nodes.some(
    (n) => indexScans.has(n["Node Type"]) && n["Index Name"] === "webhook_subscription_spaces_pkey",
  )
  const seqScans = nodes
    .filter((n) => n["Node Type"] === "Seq Scan" && subscriptionTables.has(n["Relation Name"] ?? ""))
    .map((n) => `${n["Relation Name"]} (${n["Actual Rows"]} rows x ${n["Actual Loops"]} loops)`)
  return {
    usesSpacesIndex,
    seqScansOfSubscriptionTables: seqScans,
    usesIndex: usesSpacesIndex && seqScans.length === 0,
    executionMs: plan["Execution Time"] ?? Number.NaN,
    nodeTypes: nodes.map(
      (n) =>
        `${n["Node Type"]}${n["Join Type"] ? ` (${n["Join Type"]})` : ""}${n["Relation Name"] ? ` on ${n["Relation Name"]}` : ""}` +
        `${n["Index Name"] ? ` using ${n["Index Name"]}` : ""}: ${n["Actual Rows"]} rows x ${n["Actual Loops"]} loops`,
    ),
  }
}

export interface DrainRun {
  readonly repeat: number
  readonly eventsPerSecond: number
  readonly deliveriesPerSecond: number
  readonly jobsPerSecond: number
  /** Deliveries and jobs together: the rows the round created. */
  readonly rowsPerSecond: number
  readonly seconds: number
  readonly events: number
  readonly deliveries: number
  readonly jobs: number
  readonly rounds: number
  readonly clientCores: number
  readonly machineBusy: number
  /** Mean ms per round in each phase (`RoundTrace`; `fanOut` is the fan-out statement); NaN without jobs. */
  readonly phasesMsPerRound: Readonly<Record<string, number>>
  readonly verified: boolean
}

/** N subscriptions through the public service, and a copy of them each run restores. */
const createSubscriptions = (config: RoundsConfig) =>
  Effect.gen(function* () {
    const server = yield* BenchServer
    const sql = yield* SqlClient.SqlClient
    yield* sql`TRUNCATE webhook_subscriptions CASCADE`
    yield* sql`TRUNCATE jobs`
    const createConnections = Math.max(1, config.createConcurrency)
    const created = yield* Throughput.timed(
      Effect.gen(function* () {
        const webhooks = yield* WebhookSubscriptions
        yield* Effect.forEach(
          Array.from({ length: config.subscriptions }, (_, j) => j),
          (j) =>
            webhooks.create({
              owner: "bench-owner",
              // Never dialed: no job worker runs in this part.
              url: `http://127.0.0.1:9/s${j}`,
              eventTypes: [],
              scope: [spaceOf(j % config.spaces)],
            }),
          { concurrency: createConnections, discard: true },
        )
      }).pipe(
        Effect.provide(
          WebhookSubscriptions.layer.pipe(
            Layer.provide(Layer.merge(WebhookConfig.layerWith(config.webhookSettings), EventLog.layer)),
            Layer.provide(server.pool(createConnections)),
          ),
        ),
      ),
    )
    yield* sql.unsafe(
      "DROP TABLE IF EXISTS bench_saved_subscriptions, bench_saved_subscription_spaces, bench_saved_drains",
    )
    yield* sql.unsafe("CREATE TABLE bench_saved_subscriptions AS TABLE webhook_subscriptions")
    yield* sql.unsafe(
      "CREATE TABLE bench_saved_drains AS SELECT id AS subscription_id, NULL::bigint AS job_id FROM webhook_subscriptions",
    )
    yield* sql.unsafe("CREATE TABLE bench_saved_subscription_spaces AS TABLE webhook_subscription_spaces")
    return created.seconds
  })

/** The backlog, after the subscriptions (they receive events committed after them): where it starts and ends. */
const appendBacklog = (config: RoundsConfig) =>
  Effect.gen(function* () {
    const server = yield* BenchServer
    const sql = yield* SqlClient.SqlClient
    const ours = yield* Layer.build(Layer.mergeAll(EventLog.layer, Jobs.layer).pipe(Layer.provideMerge(server.pool(1))))
    const [row] = yield* sql<{ before: bigint }>`SELECT value AS before FROM event_seq`
    const before = row!.before
    // Where the cursor stood in time too: a drain moves both, and each run starts from here again
    // (with only the seq put back, the next run reads nothing and takes the backlog for lost).
    const [cursor] = yield* sql<{ at: string }>`
      SELECT last_at::text AS at FROM event_consumer_cursors WHERE name = ${WebhookFanOut.name}`
    if (cursor === undefined) return yield* Effect.die(`no cursor ${WebhookFanOut.name}`)
    const beforeAt = cursor.at
    for (let i = 0; i < config.backlog; i += 1000) {
      const batch = Array.from({ length: Math.min(1000, config.backlog - i) }, (_, j) => eventAt(i + j, config.spaces))
      yield* EventLog.pipe(
        Effect.flatMap((l) => l.append(batch)),
        Effect.provide(ours),
      )
    }
    const head = before + BigInt(config.backlog)
    yield* sql.unsafe("VACUUM ANALYZE event_log, webhook_subscriptions, webhook_subscription_spaces")
    return { ours, before, beforeAt, head }
  })

/** What the runs of every case share once set up: the backlog's bounds and the pool the rounds use. */
interface Prepared extends Effect.Success<ReturnType<typeof appendBacklog>> {
  readonly config: RoundsConfig
  readonly sql: SqlClient.SqlClient
  readonly perEvent: number
}

/** The subscriptions as case `c` wants them, restored from the copy, and the cursor before the backlog. */
const install =
  ({ sql, before, beforeAt }: Prepared) =>
  (c: Case) =>
    Effect.gen(function* () {
      yield* sql`TRUNCATE webhook_subscriptions CASCADE`
      yield* sql`TRUNCATE jobs`
      if (c !== "none") {
        yield* sql.unsafe("INSERT INTO webhook_subscriptions SELECT * FROM bench_saved_subscriptions")
        yield* sql.unsafe("INSERT INTO webhook_drains SELECT * FROM bench_saved_drains")
        yield* sql.unsafe(
          matching(c)
            ? "INSERT INTO webhook_subscription_spaces SELECT * FROM bench_saved_subscription_spaces"
            : "INSERT INTO webhook_subscription_spaces SELECT 'unmatched-' || space_id, subscription_id FROM bench_saved_subscription_spaces",
        )
      }
      yield* sql`UPDATE event_consumer_cursors SET last_seq = ${before}, last_at = ${beforeAt}::timestamptz
        WHERE name = ${WebhookFanOut.name}`
      yield* sql.unsafe(
        "VACUUM ANALYZE webhook_subscriptions, webhook_subscription_spaces, webhook_drains, webhook_deliveries, jobs, event_consumer_cursors",
      )
      yield* sql.unsafe("CHECKPOINT")
    })

/** Deliveries as promised, unnumbered (numbers are taken when sent), each with its drain row, one job per subscription and round at most. */
const verify = ({ sql, config, head, perEvent }: Prepared, c: Case, roundJobs: number) =>
  Effect.gen(function* () {
    const [r] = yield* sql<{ deliveries: bigint; jobs: bigint; keys: bigint; cursor: bigint; unready: bigint }>`
      SELECT (SELECT count(*) FROM webhook_deliveries) AS deliveries, count(*) AS jobs,
             count(DISTINCT unique_key) AS keys,
             (SELECT last_seq FROM event_consumer_cursors WHERE name = ${WebhookFanOut.name}) AS cursor,
             (SELECT count(*) FROM (
                SELECT d.subscription_id FROM webhook_deliveries AS d
                LEFT JOIN webhook_drains AS w ON w.subscription_id = d.subscription_id
                GROUP BY d.subscription_id
                HAVING count(d.sequence) > 0 OR count(w.subscription_id) = 0) AS g) AS unready
      FROM jobs`
    const expected = matching(c) ? BigInt(config.backlog * perEvent) : 0n
    const ok =
      r?.deliveries === expected &&
      r.jobs === BigInt(roundJobs) &&
      r.keys === r.jobs &&
      r.jobs <= r.deliveries &&
      (c !== "match" || r.jobs > 0n) &&
      r.unready === 0n &&
      r.cursor === head
    if (!ok) {
      return yield* new RoundsCheckFailed({
        case: c,
        detail: `expected ${expected} deliveries, unnumbered and each with its drain row, ${roundJobs} jobs with distinct keys and cursor ${head}; found ${String(r?.deliveries)} deliveries, ${String(r?.jobs)} jobs, ${String(r?.keys)} keys, ${String(r?.unready)} subscriptions with numbered deliveries or no drain row, cursor ${String(r?.cursor)}`,
      })
    }
    return { verified: true, deliveries: Number(r.deliveries) }
  })

/** Rounds back to back until caught up, each split into phases from its spans. */
const drainRounds = (prepared: Prepared, c: Case, recorder: ReturnType<typeof RoundTrace.recorder>) =>
  Effect.gen(function* () {
    // The worker's options; without `oneStatement` they make the transactional round.
    const { oneStatement, ...transactional } = WebhookFanOut.roundOptions({ batchSize: prepared.config.batchSize })
    const round = yield* Consumer.makeRound(c === "statement" ? { ...transactional, oneStatement } : transactional)
    return yield* RoundTrace.drain(round, recorder)
  }).pipe(Effect.provide(prepared.ours), Effect.withTracer(recorder.tracer))

/** One run of case `c`: install, drain timed, verify. */
const drain = (prepared: Prepared) => (c: Case, repeat: number) =>
  Effect.gen(function* () {
    yield* install(prepared)(c)
    const timed = yield* Throughput.timed(drainRounds(prepared, c, RoundTrace.recorder()))
    const { events, jobs, rounds, phasesMs } = timed.value
    const { verified, deliveries } = yield* verify(prepared, c, jobs)
    return {
      repeat,
      eventsPerSecond: Math.round(events / timed.seconds),
      deliveriesPerSecond: Math.round(deliveries / timed.seconds),
      jobsPerSecond: Math.round(jobs / timed.seconds),
      rowsPerSecond: Math.round((deliveries + jobs) / timed.seconds),
      seconds: round3(timed.seconds),
      events,
      deliveries,
      jobs,
      rounds,
      clientCores: timed.clientCores,
      machineBusy: timed.machineBusy,
      phasesMsPerRound: Object.fromEntries(
        Object.entries(phasesMs).map(([phase, ms]) => [phase, round3(ms / Math.max(1, rounds))]),
      ),
      verified,
    } satisfies DrainRun
  })

/** The plan probes: how matching finds subscriptions, and the plain join it is weighed against. */
const explainers = ({ sql, before, ours }: Prepared) => {
  /**
   * EXPLAIN ANALYZE of the matching CTE for the first `size` events of the backlog, with the
   * subscriptions of the `match` case installed and analyzed.
   */
  const explainWith = (statement: Statement.Fragment) =>
    Effect.gen(function* () {
      const rows = yield* sql<{ "QUERY PLAN": unknown }>`EXPLAIN (ANALYZE, FORMAT JSON) ${statement}`
      const raw = rows[0]?.["QUERY PLAN"]
      const parsed = (typeof raw === "string" ? JSON.parse(raw) : raw) as ReadonlyArray<{
        readonly Plan: PlanNode
        readonly "Execution Time"?: number
      }>
      return { ...judgePlan(parsed[0]!), plan: parsed[0]! }
    })
  const firstEvents = (size: number) =>
    EventLog.pipe(
      Effect.flatMap((l) => l.read(before, size)),
      Effect.provide(ours),
    )
  const explain = (size: number) =>
    Effect.gen(function* () {
      const events = yield* firstEvents(size)
      return {
        batchEvents: events.length,
        ...(yield* explainWith(sql`${WebhookFanOut.matched(sql, events)} SELECT seq, epoch, sub FROM matched`)),
      }
    })
  /** The what-if plain join for the same events (see `matchingPlainJoin`). */
  const explainPlainJoin = (size: number) =>
    Effect.gen(function* () {
      const events = yield* firstEvents(size)
      const { plan: _, ...judged } = yield* explainWith(matchingPlainJoin(sql, events))
      return { batchEvents: events.length, ...judged }
    })
  return { explain, explainPlainJoin }
}

/** Sets up subscriptions and backlog once; returns the drain of one case and the plan probe. */
export const prepare = (config: RoundsConfig) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const createSeconds = yield* createSubscriptions(config)
    const backlog = yield* appendBacklog(config)
    const prepared: Prepared = { ...backlog, config, sql, perEvent: config.subscriptions / config.spaces }
    return {
      before: backlog.before,
      head: backlog.head,
      perEvent: prepared.perEvent,
      createSeconds: round3(createSeconds),
      install: install(prepared),
      drain: drain(prepared),
      ...explainers(prepared),
      cleanup: sql.unsafe(
        "DROP TABLE IF EXISTS bench_saved_subscriptions, bench_saved_subscription_spaces, bench_saved_drains",
      ),
    }
  })
