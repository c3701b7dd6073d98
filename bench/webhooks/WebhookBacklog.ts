/**
 * The webhooks backlog: deliveries already committed and pending, drained by the job worker as
 * `bothy worker` runs it to a local keep-alive receiver (on a thread of its own, `ReceiverThread`,
 * as tenants' endpoints are not on the worker's thread), measured from the worker's start until
 * every delivery is on record as delivered.
 *
 *   parent:  run(input) ──fork──> a child process running this file, sent the input over IPC
 *   child:   the source tree's modules (SourceTree.modules(input.root)); its own migrations on the
 *            database it is given; a clean slate (no subscriptions, deliveries or jobs; cursor at
 *            the head)
 *            S subscriptions (WebhookSubscriptions.create), subscription k to receiver path /s{k},
 *            its owner granted webhook_out.deliver
 *            S × n events in a few large appends, event i in subscription (i mod S)'s space
 *            the `webhooks` round by hand until caught up: S × n pending deliveries and the drain
 *            jobs the rounds create; VACUUM ANALYZE, CHECKPOINT
 *            clock starts ── JobWorker.layer with the drain job on queue `webhooks`, as the tree's
 *            worker runs them ── clock stops once every request arrived and every delivery is
 *            recorded delivered, or at the bound
 *            checks: each request arrived once, in order per subscription (sequence 1, 2, ... and
 *            the events in seq order); every delivery delivered, one 2xx attempt each
 *   child ──result──> parent
 *
 * One driver for every tree: the code before a change runs this same file against its own src/
 * (a checkout, with its own schema in a database of its own on the same server), and so does the
 * current code, each run in a fresh process; so the two differ in the code under test only. This
 * file and what it imports therefore take only types from src/.
 *
 * Where the driver follows `bothy worker` (src/bin/Worker.ts) is `workerConcurrency` and
 * `drainKind` below; when the worker's composition changes, they change with it.
 */
import { fork } from "node:child_process"
import { randomBytes } from "node:crypto"
import { fileURLToPath } from "node:url"
import { PgClient } from "@effect/sql-pg"
import { Cause, Console, Duration, Effect, Exit, Layer, Redacted, Schema } from "effect"
import { SqlClient } from "effect/sql"
import * as CpuUsage from "../harness/CpuUsage.ts"
import * as DeliveryTrace from "../harness/DeliveryTrace.ts"
import { round3 } from "../harness/Figures.ts"
import * as ReceiverThread from "../harness/ReceiverThread.ts"
import * as SourceTree from "../harness/SourceTree.ts"
import { eventAt, owner, spaceOf } from "../harness/WebhookSample.ts"

// ---- what the real worker runs: adapt these when src/bin/Worker.ts changes ----

/** The job worker's concurrency on queue `webhooks` in `bothy worker`. */
const workerConcurrency = (tree: SourceTree.Modules) => tree.Worker.deliveryConcurrency

/** The drain job as `bothy worker` makes it (with the drain options it passes). */
const drainKind = (tree: SourceTree.Modules) => tree.WebhookDrainer.make

// ---- names an earlier tree (the baseline) gives differently ------------------------------------

type SubscriptionsService = SourceTree.Modules["WebhookSubscriptions"]["WebhookSubscriptions"]

/** The subscriptions service, which trees before its rename export as `Webhooks`. */
const subscriptionsService = (tree: SourceTree.Modules): SubscriptionsService => {
  const module: Partial<Record<"WebhookSubscriptions" | "Webhooks", SubscriptionsService>> = tree.WebhookSubscriptions
  return module.WebhookSubscriptions ?? module.Webhooks!
}

// ---- one run -----------------------------------------------------------------------------------

export interface BacklogCase {
  readonly subscriptions: number
  /** Pending deliveries of each subscription when the clock starts. */
  readonly perSubscription: number
}

export const caseName = (c: BacklogCase) => `${c.subscriptions}x${c.perSubscription}`

export class InvalidBacklogCases extends Schema.TaggedError<InvalidBacklogCases>()("InvalidBacklogCases", {
  variable: Schema.String,
  value: Schema.String,
}) {
  override get message() {
    return `${this.variable} = ${JSON.stringify(this.value)}: expected cases "SUBSCRIPTIONSxPENDING" separated by commas, each a whole number above 0, e.g. "1x10000,10x5000"`
  }
}

/** Cases written `SxN` (S subscriptions with N pending deliveries each), separated by commas. */
export const parseCases = (variable: string, value: string) => {
  const cases = value.split(",").map((item) => /^\s*([1-9]\d*)\s*x\s*([1-9]\d*)\s*$/.exec(item))
  return cases.every((m) => m !== null)
    ? Effect.succeed(cases.map((m): BacklogCase => ({ subscriptions: Number(m[1]), perSubscription: Number(m[2]) })))
    : Effect.fail(new InvalidBacklogCases({ variable, value }))
}

export interface BacklogInput extends BacklogCase {
  /** Which tree runs, for messages ("ours", "baseline"). */
  readonly label: string
  /** The source tree whose src/ runs: `SourceTree.here` or a checkout's root. */
  readonly root: string
  readonly server: {
    readonly host: string
    readonly port: number
    readonly user: string
    readonly password: string
    /** A database of its own for the tree, migrated by the tree's own migrations. */
    readonly database: string
    /** The server's data directory, to find its processes for the CPU figures. */
    readonly dataDir: string
  }
  /** The worker's pool (the LISTEN connection is extra). */
  readonly connections: number
  /** The `webhooks` round's batch size while setting up. */
  readonly batchSize: number
  /** Events per append while setting up. */
  readonly appendSize: number
  /** The clock stops here at the latest; the run then reports what was delivered by then. */
  readonly boundSeconds: number
}

export interface BacklogRun extends BacklogCase {
  readonly label: string
  readonly deliveries: number
  readonly concurrency: number
  /** Every delivery recorded delivered before the bound. */
  readonly drained: boolean
  /** From the worker's start until every delivery was recorded delivered, or until the bound. */
  readonly seconds: number
  /** Deliveries recorded delivered when the clock stopped. */
  readonly delivered: number
  readonly deliveriesPerSecond: number
  /** Requests that had arrived when the clock stopped. */
  readonly received: number
  readonly lastArrivalSeconds: number
  /** Requests arriving in each second after the start. */
  readonly arrivalsPerSecond: ReadonlyArray<number>
  readonly setup: {
    readonly appends: number
    readonly appendSeconds: number
    readonly rounds: number
    readonly roundSeconds: number
    /** Drain jobs the rounds created (a job per subscription and round: no drainer ran yet). */
    readonly jobs: number
  }
  readonly drain: {
    /** Drain job runs, including those that found the slot held and ended at once. */
    readonly jobRuns: number
    /** Statements under `Job.run` per delivery: acquire, read, record, release. */
    readonly statementsPerDelivery: number
    readonly statementMsPerDelivery: number
  }
  /** While the clock ran: the child process, the server, the machine. */
  /** This process (the worker, and the receiver's thread) and the server, in cores. */
  readonly cpu: CpuUsage.CpuUsed
  /** The receiver's thread (the tenants' endpoints), in cores: part of `cpu.clientCores`, not the worker's. */
  readonly receiverCores: number
}

/** A run's requests or rows are not what the drain promises; its figure is void. */
export class BacklogCheckFailed extends Schema.TaggedError<BacklogCheckFailed>()("BacklogCheckFailed", {
  label: Schema.String,
  case: Schema.String,
  detail: Schema.String,
}) {
  override get message() {
    return `backlog ${this.case} (${this.label}): ${this.detail}`
  }
}

/** What the steps of one run share. */
interface Shared {
  readonly tree: SourceTree.Modules
  readonly input: BacklogInput
  readonly total: number
  readonly fail: (detail: string) => BacklogCheckFailed
  readonly log: (line: string) => Effect.Effect<void>
}

/** The tree's own migrations, then no subscriptions, deliveries, jobs or recorded sealing key, and the consumer caught up. */
const cleanSlate = ({ tree }: Shared) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    yield* tree.Migrations.run
    yield* sql`TRUNCATE webhook_subscriptions CASCADE`
    yield* sql`TRUNCATE jobs`
    // With no subscription left, no secret is sealed: each run's driver seals under a key of its
    // own, which the database's sealing-key check (newer trees) would otherwise refuse.
    yield* sql.unsafe(
      "DO $$ BEGIN IF to_regclass('webhook_sealing_key') IS NOT NULL THEN DELETE FROM webhook_sealing_key; END IF; END $$",
    )
    yield* sql`
      UPDATE event_consumer_cursors SET last_seq = (SELECT value FROM event_seq)
      WHERE name = ${tree.WebhookFanOut.name}`
  })

/** The subscriptions, then their events, then the rounds: every delivery pending before the clock starts. */
const createBacklog = ({ tree, input, total, fail }: Shared, url: (path: string) => string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const webhooks = yield* subscriptionsService(tree)
    const log = yield* tree.EventLog.EventLog
    for (let k = 0; k < input.subscriptions; k++) {
      yield* tree.PermissionGrants.grant(owner, tree.Permissions.webhookDeliver, spaceOf(k))
      yield* webhooks.create({ owner, url: url(`/s${k}`), eventTypes: [], scope: [spaceOf(k)] })
    }
    const appendStart = performance.now()
    let appends = 0
    for (let i = 0; i < total; i += input.appendSize) {
      yield* log.append(
        Array.from({ length: Math.min(input.appendSize, total - i) }, (_, j) => eventAt(i + j, input.subscriptions)),
      )
      appends++
    }
    const appendSeconds = (performance.now() - appendStart) / 1000
    const roundStart = performance.now()
    const round = yield* tree.Consumer.makeRound(tree.WebhookFanOut.roundOptions({ batchSize: input.batchSize }))
    let rounds = 0
    let jobs = 0
    for (;;) {
      const outcome = yield* round
      if (outcome._tag === "CaughtUp") break
      if (outcome._tag !== "Processed") return yield* fail(`set-up round ended ${outcome._tag}`)
      rounds++
      jobs += outcome.jobs
    }
    const roundSeconds = (performance.now() - roundStart) / 1000
    const [pending] = yield* sql<{ n: number; least: number; most: number }>`
      SELECT coalesce(sum(n), 0)::int AS n, coalesce(min(n), 0)::int AS least, coalesce(max(n), 0)::int AS most
      FROM (SELECT count(*) AS n FROM webhook_deliveries WHERE state = 'pending' GROUP BY subscription_id) AS per`
    if (pending?.n !== total || pending.least !== input.perSubscription || pending.most !== input.perSubscription) {
      return yield* fail(
        `the set-up left ${pending?.n} pending deliveries (${pending?.least}..${pending?.most} per subscription), not ${input.perSubscription} for each of ${input.subscriptions}`,
      )
    }
    yield* sql.unsafe(
      "VACUUM ANALYZE event_log, webhook_subscriptions, webhook_subscription_spaces, webhook_drains, webhook_deliveries, webhook_attempts, jobs, permission_grants",
    )
    // The set-up's pages are written now, not by a checkpoint while the clock runs.
    yield* sql.unsafe("CHECKPOINT")
    return { appends, appendSeconds: round3(appendSeconds), rounds, roundSeconds: round3(roundSeconds), jobs }
  })

/**
 * From the job worker's start until every request has arrived and every delivery is recorded
 * delivered (counted every 5 ms once the last request is in), or until the bound. The worker
 * stops (the scope closes) after the clock.
 */
const drainOnClock = (
  { tree, input, total }: Shared,
  receiver: Effect.Success<ReturnType<typeof ReceiverThread.start>>,
) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const delivered = sql<{ n: number }>`
      SELECT count(*)::int AS n FROM webhook_deliveries WHERE state = 'delivered'`.pipe(
      Effect.map((rows) => rows[0]?.n ?? 0),
    )
    const concurrency = workerConcurrency(tree)
    const trace = DeliveryTrace.recorder()
    const postmaster = CpuUsage.postmasterPid(input.server.dataDir)
    const receiverMicros0 = yield* receiver.cpuMicros
    const cpu0 = CpuUsage.sample(postmaster)
    const t0 = performance.now()
    const deadline = t0 + input.boundSeconds * 1000
    const kind = yield* drainKind(tree)
    yield* Layer.build(
      tree.JobWorker.layer({ kinds: [kind], queues: { [tree.WebhookFanOut.queue]: { concurrency } } }),
    ).pipe(Effect.withTracer(trace.tracer))
    yield* Effect.promise(() => receiver.allArrived).pipe(
      Effect.timeoutOption(Duration.millis(Math.max(0, deadline - performance.now()))),
    )
    let n = yield* delivered
    while (n < total && performance.now() < deadline) {
      yield* Effect.sleep("5 millis")
      n = yield* delivered
    }
    const end = performance.now()
    const cpu1 = CpuUsage.sample(postmaster)
    const receiverMicros = (yield* receiver.cpuMicros) - receiverMicros0
    return {
      t0,
      seconds: (end - t0) / 1000,
      delivered: n,
      received: receiver.received(),
      concurrency,
      cpu: CpuUsage.since(cpu0, cpu1),
      receiverCores: round3(receiverMicros / 1000 / (cpu1.at - cpu0.at)),
      jobRuns: trace.jobRuns(),
      statements: trace.statements(),
    }
  }).pipe(Effect.scoped)

/** A drain that broke its promises voids its figure: requests once and in order, rows as sent. */
const verify = (
  { total, fail }: Shared,
  requests: { readonly anomalies: ReadonlyArray<string>; readonly received: number },
  drained: boolean,
) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const [rows] = yield* sql<{ other: number; attempts: number; failed: number }>`
      SELECT count(*) FILTER (WHERE state <> 'delivered')::int AS other,
             (SELECT count(*) FROM webhook_attempts)::int AS attempts,
             (SELECT count(*) FROM webhook_attempts WHERE status IS NULL OR status NOT BETWEEN 200 AND 299)::int AS failed
      FROM webhook_deliveries`
    if (requests.anomalies.length > 0) {
      return yield* fail(
        `${requests.anomalies.length} requests out of order, repeated or unknown; first: ${requests.anomalies.slice(0, 3).join("; ")}`,
      )
    }
    if (rows === undefined || rows.failed > 0 || rows.attempts > requests.received) {
      return yield* fail(
        `${rows?.failed} attempts were not 2xx, and ${rows?.attempts} attempts are on record for ${requests.received} requests received`,
      )
    }
    if (drained && (requests.received !== total || rows.other > 0 || rows.attempts !== total)) {
      return yield* fail(
        `drained, but ${requests.received} requests arrived, ${rows.other} deliveries are not delivered and ${rows.attempts} attempts are on record, for ${total} deliveries`,
      )
    }
  })

/** One run in this process: the tree's modules, its database, the set-up, the drain, the checks. */
export const measure = (input: BacklogInput) =>
  Effect.gen(function* () {
    const tree = yield* SourceTree.modules(input.root)
    const name = caseName(input)
    const total = input.subscriptions * input.perSubscription
    const ctx: Shared = {
      tree,
      input,
      total,
      fail: (detail) => new BacklogCheckFailed({ label: input.label, case: name, detail }),
      log: (line) => Console.log(`backlog ${name} (${input.label}): ${line}`),
    }
    const db = yield* Layer.build(
      PgClient.layer({
        host: input.server.host,
        port: input.server.port,
        username: input.server.user,
        password: Redacted.make(input.server.password),
        database: input.server.database,
        maxConnections: input.connections,
        applicationName: "bothy-bench",
      }),
    )
    yield* cleanSlate(ctx).pipe(Effect.provideContext(db))
    const webhookSettings = {
      secretKey: yield* tree.SecretBox.parseKey(Redacted.make(randomBytes(32).toString("base64"))),
      policy: { allowHttpLoopback: true, allowCidrs: [], allowHosts: [] },
    }
    const services = yield* Layer.build(
      Layer.mergeAll(
        tree.Jobs.Jobs.layer,
        tree.PermissionGrants.layer,
        tree.NotificationStream.NotificationStream.layer(),
        subscriptionsService(tree).layer,
      ).pipe(
        // The log beneath the subscriptions: a disable appends its operational event with it.
        Layer.provideMerge(tree.EventLog.EventLog.layer),
        Layer.provideMerge(tree.WebhookConfig.WebhookConfig.layerWith(webhookSettings)),
        Layer.provideMerge(Layer.succeedContext(db)),
      ),
    )
    const receiver = yield* ReceiverThread.start(total, { _tag: "inOrder", subscriptions: input.subscriptions })

    const setup = yield* createBacklog(ctx, receiver.url).pipe(Effect.provideContext(services))
    yield* ctx.log(
      `${total} pending deliveries (${setup.appends} appends in ${setup.appendSeconds} s, ${setup.rounds} rounds in ${setup.roundSeconds} s, ${setup.jobs} drain jobs); draining with concurrency ${workerConcurrency(tree)}`,
    )
    const clock = yield* drainOnClock(ctx, receiver).pipe(Effect.provideContext(services))
    const drained = clock.delivered === total
    yield* verify(ctx, { anomalies: yield* receiver.anomalies, received: receiver.received() }, drained).pipe(
      Effect.provideContext(services),
    )

    const arrived = Array.from(receiver.arrivals().subarray(0, Math.min(total, clock.received)), (at) => at - clock.t0)
    const arrivalsPerSecond = Array.from({ length: Math.ceil(clock.seconds) }, () => 0)
    for (const at of arrived) {
      const s = Math.floor(at / 1000)
      if (s < arrivalsPerSecond.length) arrivalsPerSecond[s]! += 1
    }
    const result: BacklogRun = {
      label: input.label,
      subscriptions: input.subscriptions,
      perSubscription: input.perSubscription,
      deliveries: total,
      concurrency: clock.concurrency,
      drained,
      seconds: round3(clock.seconds),
      delivered: clock.delivered,
      deliveriesPerSecond: round3(clock.delivered / clock.seconds),
      received: clock.received,
      lastArrivalSeconds: round3(Math.max(0, ...arrived) / 1000),
      arrivalsPerSecond,
      setup,
      drain: {
        jobRuns: clock.jobRuns,
        statementsPerDelivery: round3(clock.statements.count / Math.max(1, clock.delivered)),
        statementMsPerDelivery: round3(clock.statements.ms / Math.max(1, clock.delivered)),
      },
      cpu: clock.cpu,
      receiverCores: clock.receiverCores,
    }
    yield* ctx.log(
      `${clock.delivered}/${total} delivered in ${result.seconds} s: ${result.deliveriesPerSecond} deliveries/s${drained ? "" : ` (stopped at the ${input.boundSeconds} s bound)`}`,
    )
    return result
  }).pipe(Effect.scoped)

// ---- the child process -------------------------------------------------------------------------

export class BacklogRunFailed extends Schema.TaggedError<BacklogRunFailed>()("BacklogRunFailed", {
  label: Schema.String,
  case: Schema.String,
  detail: Schema.String,
}) {
  override get message() {
    return `backlog ${this.case} (${this.label}) failed in its driver process: ${this.detail}`
  }
}

type Reply = { readonly ok: BacklogRun } | { readonly failed: string }

/** Runs `measure(input)` in a fresh child process (this file) and returns its result. */
export const run = (input: BacklogInput) =>
  Effect.acquireRelease(
    Effect.sync(() => fork(fileURLToPath(import.meta.url), [], { stdio: ["ignore", "inherit", "inherit", "ipc"] })),
    (child) => Effect.sync(() => child.exitCode === null && child.signalCode === null && child.kill("SIGKILL")),
  ).pipe(
    Effect.flatMap((child) =>
      Effect.callback<BacklogRun, BacklogRunFailed>((resume) => {
        const failed = (detail: string) =>
          Effect.fail(new BacklogRunFailed({ label: input.label, case: caseName(input), detail }))
        let reply: Reply | undefined
        child.once("message", (m: Reply) => {
          reply = m
        })
        // Settled on exit, so the child's connections are closed before the next run starts.
        child.once("exit", (code, signal) =>
          resume(
            reply === undefined
              ? failed(`exited (${code ?? signal}) without a result`)
              : "ok" in reply
                ? Effect.succeed(reply.ok)
                : failed(reply.failed),
          ),
        )
        child.send(input)
      }),
    ),
    Effect.scoped,
  )

if (import.meta.main) {
  process.once("message", (input: BacklogInput) => {
    void Effect.runPromiseExit(measure(input)).then((exit) => {
      const reply: Reply = Exit.isSuccess(exit) ? { ok: exit.value } : { failed: Cause.pretty(exit.cause) }
      process.send?.(reply, () => process.exit(Exit.isSuccess(exit) ? 0 : 1))
    })
  })
}
