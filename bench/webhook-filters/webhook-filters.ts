/**
 * `npm run bench -- webhook-filters`: the `webhooks` round (the one statement the worker runs)
 * draining a backlog with 100 subscriptions, half of them with payload filters, against the same
 * subscriptions without filters, in the same run. Target: the filtered round keeps >= 0.8x the
 * unfiltered one's events/s.
 *
 *   setup (once):  100 subscriptions through `WebhookSubscriptions.create`, subscription j covering
 *                  `space-(j mod 10)`, odd j with a filter (`amount >= threshold_j` and
 *                  `note startsWith "leave"`, thresholds spread so about half the events pass);
 *                  then BENCH_FILTER_BACKLOG events, event i in `space-(i mod 10)`
 *   each run:      subscriptions restored (filters kept or dropped) -> cursor before the backlog ->
 *                  rounds back to back until caught up -> check the deliveries against the count
 *                  computed here in TypeScript from the same thresholds
 *
 * No job worker and no receiver run: the figure is what the round turns into deliveries and jobs.
 */
import { randomBytes } from "node:crypto"
import { Config, Console, Effect, Layer, Redacted, Schema } from "effect"
import { SqlClient } from "effect/sql"
import * as Consumer from "../../src/consumer/Consumer.ts"
import * as SecretBox from "../../src/crypto/SecretBox.ts"
import { Jobs } from "../../src/jobs/Jobs.ts"
import type { NewEvent } from "../../src/log/Event.ts"
import { EventLog } from "../../src/log/EventLog.ts"
import type { Filter } from "../../src/webhooks/subscriptions/PayloadFilter.ts"
import { WebhookSubscriptions } from "../../src/webhooks/subscriptions/WebhookSubscriptions.ts"
import { WebhookConfig } from "../../src/webhooks/WebhookConfig.ts"
import * as WebhookFanOut from "../../src/webhooks/WebhookFanOut.ts"
import type { Benchmark } from "../harness/Benchmark.ts"
import { BenchServer } from "../harness/BenchServer.ts"
import { round3 } from "../harness/Figures.ts"
import * as Throughput from "../harness/Throughput.ts"

const subscriptions = 100
const spaces = 10
const batchSize = 500
const cases = ["unfiltered", "filtered"] as const
type Case = (typeof cases)[number]

const settings = Config.all({
  throughput: Throughput.settings,
  backlog: Config.Int("BENCH_FILTER_BACKLOG").pipe(Config.withDefault(20_000)),
})

export class FilterCheckFailed extends Schema.TaggedError<FilterCheckFailed>()("FilterCheckFailed", {
  case: Schema.String,
  detail: Schema.String,
}) {
  override get message() {
    return `after a ${this.case} drain, the deliveries are not what the filters promise: ${this.detail}`
  }
}

const amountOf = (i: number) => (i * 3779) % 1000
const eventAt = (i: number): NewEvent => ({
  space: `space-${i % spaces}`,
  type: "order.placed",
  actor: `user:${i % 997}`,
  payload: {
    i,
    id: `ord_${(i * 7919).toString(16)}`,
    amount: amountOf(i),
    note: "leave at the door",
    tags: ["a", "b"],
  },
})

/** Subscription j's threshold (odd j only): 0 to 980, so about half the events pass on average. */
const thresholdOf = (j: number) => ((j * 37) % 50) * 20
const filterOf = (j: number): Filter | undefined =>
  j % 2 === 0
    ? undefined
    : {
        and: [
          { path: "$.amount", gte: thresholdOf(j) },
          { path: "$.note", startsWith: "leave" },
        ],
      }

/** The deliveries the backlog makes for case `c`, counted here rather than by the SQL under test. */
const expectedDeliveries = (backlog: number, c: Case) => {
  let n = 0
  for (let i = 0; i < backlog; i++) {
    for (let j = i % spaces; j < subscriptions; j += spaces) {
      if (c === "unfiltered" || j % 2 === 0 || amountOf(i) >= thresholdOf(j)) n++
    }
  }
  return n
}

const setUp = (backlog: number) =>
  Effect.gen(function* () {
    const server = yield* BenchServer
    const sql = yield* SqlClient.SqlClient
    const webhookSettings = {
      secretKey: yield* SecretBox.parseKey(Redacted.make(randomBytes(32).toString("base64"))),
      policy: { allowHttpLoopback: true, allowCidrs: [], allowHosts: [] },
    }
    yield* Effect.forEach(
      Array.from({ length: subscriptions }, (_, j) => j),
      (j) =>
        Effect.flatMap(WebhookSubscriptions, (w) => {
          const filter = filterOf(j)
          return w.create({
            owner: "bench-owner",
            url: `http://127.0.0.1:9/s${j}`,
            eventTypes: [],
            scope: [`space-${j % spaces}`],
            ...(filter === undefined ? {} : { filter: filter as Schema.Json }),
          })
        }),
      { discard: true },
    ).pipe(
      Effect.provide(
        WebhookSubscriptions.layer.pipe(
          Layer.provide(Layer.merge(WebhookConfig.layerWith(webhookSettings), EventLog.layer)),
        ),
      ),
    )
    yield* sql.unsafe("CREATE TABLE bench_saved_subscriptions AS TABLE webhook_subscriptions")
    yield* sql.unsafe("CREATE TABLE bench_saved_subscription_spaces AS TABLE webhook_subscription_spaces")
    // The unfiltered copy is written once, so both cases install a freshly inserted table: an
    // UPDATE at install would leave the unfiltered one twice the pages, and the planner then
    // probes its key where it scans the filtered one's (the comparison would be of layouts).
    yield* sql.unsafe("CREATE TABLE bench_saved_unfiltered AS TABLE bench_saved_subscriptions")
    yield* sql.unsafe("UPDATE bench_saved_unfiltered SET filter = NULL, filter_path = NULL")
    const log = yield* Layer.build(Layer.mergeAll(EventLog.layer, Jobs.layer).pipe(Layer.provideMerge(server.pool(1))))
    const [row] = yield* sql<{ before: bigint }>`SELECT value AS before FROM event_seq`
    // Where the cursor stood, seq and time: a drain moves both, and each run starts from here again.
    const [cursor] = yield* sql<{ at: string }>`
      SELECT last_at::text AS at FROM event_consumer_cursors WHERE name = ${WebhookFanOut.name}`
    for (let i = 0; i < backlog; i += 1000) {
      const batch = Array.from({ length: Math.min(1000, backlog - i) }, (_, k) => eventAt(i + k))
      yield* Effect.flatMap(EventLog, (l) => l.append(batch)).pipe(Effect.provide(log))
    }
    yield* sql.unsafe("VACUUM ANALYZE event_log, webhook_subscriptions, webhook_subscription_spaces")
    if (cursor === undefined) return yield* Effect.die(`no cursor ${WebhookFanOut.name}`)
    return { before: row!.before, beforeAt: cursor.at, log }
  })

/** The subscriptions as case `c` wants them (the filters dropped for `unfiltered`), the cursor (seq and time) before the backlog. */
const install = (before: bigint, beforeAt: string, c: Case) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    yield* sql`TRUNCATE webhook_subscriptions CASCADE`
    yield* sql`TRUNCATE jobs`
    yield* sql.unsafe(
      `INSERT INTO webhook_subscriptions SELECT * FROM ${c === "unfiltered" ? "bench_saved_unfiltered" : "bench_saved_subscriptions"}`,
    )
    yield* sql.unsafe("INSERT INTO webhook_subscription_spaces SELECT * FROM bench_saved_subscription_spaces")
    yield* sql`UPDATE event_consumer_cursors SET last_seq = ${before}, last_at = ${beforeAt}::timestamptz
      WHERE name = ${WebhookFanOut.name}`
    yield* sql.unsafe("VACUUM ANALYZE webhook_subscriptions, webhook_subscription_spaces, webhook_deliveries, jobs")
  })

const drainRounds = Effect.gen(function* () {
  const round = yield* Consumer.makeRound(WebhookFanOut.roundOptions({ batchSize }))
  let events = 0
  for (;;) {
    const outcome = yield* round
    if (outcome._tag === "CaughtUp") return events
    if (outcome._tag !== "Processed") return yield* Effect.die(`unexpected round outcome ${outcome._tag}`)
    events += outcome.events
  }
})

const measure = Effect.gen(function* () {
  const config = yield* settings
  const sql = yield* SqlClient.SqlClient
  const { before, beforeAt, log } = yield* setUp(config.backlog)
  const runs: Record<Case, Array<{ eventsPerSecond: number; deliveries: number; seconds: number }>> = {
    unfiltered: [],
    filtered: [],
  }
  for (let repeat = 0; repeat < config.throughput.repeats; repeat++) {
    for (let k = 0; k < cases.length; k++) {
      const c = cases[(k + repeat) % cases.length]!
      yield* install(before, beforeAt, c)
      const timed = yield* Throughput.timed(drainRounds.pipe(Effect.provide(log)))
      const [counted] = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM webhook_deliveries`
      const expected = expectedDeliveries(config.backlog, c)
      if (counted?.n !== expected || timed.value !== config.backlog) {
        return yield* new FilterCheckFailed({
          case: c,
          detail: `expected ${expected} deliveries over ${config.backlog} events; found ${counted?.n} over ${timed.value}`,
        })
      }
      const eventsPerSecond = Math.round(timed.value / timed.seconds)
      runs[c].push({ eventsPerSecond, deliveries: counted.n, seconds: round3(timed.seconds) })
      yield* Console.log(`${c} #${repeat + 1}: ${eventsPerSecond} events/s, ${counted.n} deliveries`)
    }
  }
  yield* sql.unsafe("DROP TABLE bench_saved_subscriptions, bench_saved_unfiltered, bench_saved_subscription_spaces")
  const median = (c: Case) => Throughput.median(runs[c].map((r) => r.eventsPerSecond))
  const ratio = round3(median("filtered") / median("unfiltered"))
  return {
    conditions: {
      subscriptions,
      filtered: subscriptions / 2,
      spaces,
      batchSize,
      backlog: config.backlog,
      repeats: config.throughput.repeats,
      round: "the one-statement round (WebhookFanOut.roundOptions), no job worker",
      filter: "and(amount >= threshold, note startsWith 'leave'), thresholds 0..980",
    },
    results: runs,
    baseline: "the same subscriptions without filters, same run",
    targets: [
      { name: "filtered round >= 0.8x the unfiltered one's events/s", value: ratio, target: 0.8, met: ratio >= 0.8 },
    ],
    table: {
      columns: ["case", "runs", "events/s", "deliveries"],
      rows: cases.map((c) => [c, String(runs[c].length), String(median(c)), String(runs[c][0]?.deliveries ?? 0)]),
    },
  }
})

const run = Effect.gen(function* () {
  const server = yield* BenchServer
  return yield* measure.pipe(Effect.provide(server.pool(2)))
})

const benchmark: Benchmark = {
  description: "the webhooks round with 100 subscriptions, half with payload filters, against none filtered",
  run,
  smoke: { BENCH_FILTER_BACKLOG: "1000" },
}
export default benchmark
