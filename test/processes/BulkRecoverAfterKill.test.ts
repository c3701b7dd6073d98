import { assert, layer } from "@effect/vitest"
import { Effect } from "effect"
import { SqlClient } from "effect/sql"
import * as BulkRecovery from "../../src/webhooks/subscriptions/BulkRecovery.ts"
import { WebhookSubscriptions } from "../../src/webhooks/subscriptions/WebhookSubscriptions.ts"
import * as WebhookReceiver from "../../testkit/WebhookReceiver.ts"
import { eventually } from "../support/Eventually.ts"
import * as NodeProcess from "../support/NodeProcess.ts"
import * as RowLock from "../support/RowLock.ts"
import { TestDatabase } from "../support/TestDatabase.ts"
import * as TestWebhooks from "../support/TestWebhooks.ts"
import * as WorkerProcess from "../support/WorkerProcess.ts"

const key = WorkerProcess.rawKey()
const Live = TestWebhooks.layer({ secretKey: key })

const perSubscription = 6

/**
 * Four subscriptions of `owner` (in id order), each with `perSubscription` events whose deliveries
 * ended dead (`disabled:manual`) before any was sent: disabled before a drainer ran, then enabled
 * again from the head.
 */
const failedSubscriptions = (owner: string, receiver: WebhookReceiver.WebhookReceiver) =>
  Effect.gen(function* () {
    const webhooks = yield* WebhookSubscriptions
    const ids: Array<string> = []
    for (const n of [0, 1, 2, 3]) {
      ids.push((yield* TestWebhooks.subscribe(owner, receiver.url(`/${owner}/${n}`), [`${owner}-${n}`])).id)
    }
    for (const n of [0, 1, 2, 3]) {
      for (let i = 0; i < perSubscription; i++) yield* TestWebhooks.append(`${owner}-${n}`, { i })
    }
    yield* TestWebhooks.round()
    for (const id of ids) yield* webhooks.disable(id)
    for (const id of ids) yield* webhooks.enable(id)
    // A round reads past the disables' own `bothy.subscription.disabled` events.
    yield* TestWebhooks.round()
    return ids.sort()
  })

const workerEnv = Effect.map(TestDatabase, ({ url }) => ({
  DATABASE_URL: url,
  BOTHY_WEBHOOK_SECRET_KEY: key,
  BOTHY_WEBHOOK_ALLOW_HTTP_LOOPBACK: "true",
}))

const startWorker = Effect.gen(function* () {
  const worker = yield* NodeProcess.start(NodeProcess.bothy, ["worker"], yield* workerEnv)
  yield* worker.waitFor(/worker running/)
  return worker
})

const delivered = (ids: ReadonlyArray<string>) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql<{ n: number }>`
      SELECT count(*)::int AS n FROM webhook_deliveries
      WHERE subscription_id = ANY(${ids}::uuid[]) AND state = 'delivered'`,
  ).pipe(Effect.map(([r]) => r!.n))

/** Whether some backend waits for a lock while it locks a subscription's row (the recovery's batch). */
const waitingOnSubscription = Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => sql<{ n: number }>`
    SELECT count(*)::int AS n FROM pg_stat_activity
    WHERE wait_event_type = 'Lock' AND query LIKE '%FROM webhook_subscriptions AS s WHERE s.id =%FOR UPDATE%'`,
).pipe(Effect.map(([r]) => r!.n > 0))

/** What the receiver got for each path: the `i` of each request, in order, and the `sequence`s. */
const byPath = (receiver: WebhookReceiver.WebhookReceiver) => {
  const paths = new Map<string, Array<[number, number]>>()
  for (const r of receiver.log) {
    const e = TestWebhooks.envelope(r)
    paths.set(r.path, [...(paths.get(r.path) ?? []), [e.data.i, e.sequence]])
  }
  return paths
}

const wait = { within: "60 seconds", every: "50 millis" } as const

layer(Live, { excludeTestServices: true })("bulk recovery across processes", (it) => {
  it.effect(
    "BulkRecoverResumesAfterKill: the worker running the recovery is SIGKILLed halfway, in a batch; a second worker resumes it from the durable cursor and no delivery is sent twice",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const receiver = yield* WebhookReceiver.start(() => ({ status: 200 }))
        const subs = yield* failedSubscriptions("kill", receiver)
        const { job, total } = yield* BulkRecovery.request({ owner: "kill" }, { batchSize: 4 })
        assert.strictEqual(total, 4 * perSubscription)

        // The third subscription's row is held: the batch that reaches it waits, halfway through.
        const lock = yield* RowLock.hold(
          sql`SELECT 1 FROM webhook_subscriptions WHERE id = ${subs[2]!}::uuid FOR UPDATE`,
        )
        const first = yield* startWorker
        yield* eventually(waitingOnSubscription, (w) => w, { what: "the recovery's batch waits on the lock", ...wait })
        const before = yield* BulkRecovery.get(job)
        assert.deepStrictEqual(
          [before.state, before.examined, before.resent],
          ["running", 2 * perSubscription, 2 * perSubscription],
          "the first two subscriptions are done, committed",
        )
        // The revived deliveries have gone out and are on record, so no drainer has one in flight.
        yield* eventually(delivered(subs), (n) => n === 2 * perSubscription, {
          what: "the first half delivered",
          ...wait,
        })

        first.child.kill("SIGKILL")
        assert.strictEqual((yield* first.exited).signal, "SIGKILL")
        yield* lock.release
        const [orphaned] = yield* sql<{ state: string; attempt: number }>`
          SELECT state::text AS state, attempt FROM jobs WHERE id = ${job}`
        assert.deepStrictEqual(orphaned, { state: "running", attempt: 1 }, "the killed worker held the job")
        const afterKill = yield* BulkRecovery.get(job)
        assert.strictEqual(afterKill.examined, 2 * perSubscription, "the batch in hand was rolled back")

        const second = yield* startWorker
        const finished = yield* eventually(BulkRecovery.get(job), (r) => r.state === "done", {
          what: "the recovery done",
          ...wait,
        })
        assert.deepStrictEqual(
          [finished.examined, finished.resent, finished.skipped],
          [4 * perSubscription, 4 * perSubscription, 0],
        )
        yield* eventually(delivered(subs), (n) => n === 4 * perSubscription, { what: "everything delivered", ...wait })
        second.child.kill("SIGTERM")
        yield* second.exited

        const paths = byPath(receiver)
        assert.strictEqual(receiver.log.length, 4 * perSubscription, "one request per delivery: none sent twice")
        for (const n of [0, 1, 2, 3]) {
          assert.deepStrictEqual(
            paths.get(`/kill/${n}`),
            Array.from({ length: perSubscription }, (_, i) => [i, i + 1]),
            `subscription ${n}: each event once, in seq order, numbered gap-free`,
          )
        }
      }).pipe(Effect.scoped),
    { timeout: 120_000 },
  )

  it.effect(
    "BulkRecoverCliPausesAndResumes: bothy deliveries recover-bulk shows its progress line, Ctrl-C pauses the recovery, and recovery --resume finishes it",
    () =>
      Effect.gen(function* () {
        const receiver = yield* WebhookReceiver.start(() => ({ status: 200 }))
        const subs = yield* failedSubscriptions("cli", receiver)
        const env = yield* workerEnv
        const help = yield* NodeProcess.run(NodeProcess.bothy, ["deliveries", "recover-bulk", "--help"], env)
        for (const flag of ["--owner", "--subscription", "--event-type", "--state", "--since", "--until", "--all"]) {
          assert.include(help.stdout, flag)
        }
        assert.match(help.stdout, /--replay-to/)
        assert.match(help.stdout, /Ctrl-C pauses it/)
        // No worker yet: the command asks for the recovery and watches it wait.
        const watching = yield* NodeProcess.start(
          NodeProcess.bothy,
          ["deliveries", "recover-bulk", "--owner", "cli", "--batch-size", "5"],
          env,
          { detached: true },
        )
        const asked = yield* watching.waitFor(/^recovery \d+ \(job webhook.bulk-recover\) selects 24 deliveries/)
        const job = /^recovery (\d+)/.exec(asked)![1]!
        yield* watching.waitFor(/^\[-+\]\s+0% 0\/24 examined, 0 resent, 0 skipped \(running\)$/)
        process.kill(-watching.child.pid!, "SIGINT")
        const stopped = yield* watching.exited
        assert.match(
          stopped.stderr,
          new RegExp(
            `recovery ${job} paused after the batch in hand; resume it with: bothy deliveries recovery ${job} --resume`,
          ),
        )
        assert.strictEqual((yield* BulkRecovery.get(BigInt(job))).state, "paused")

        const worker = yield* startWorker
        const resumed = yield* NodeProcess.run(NodeProcess.bothy, ["deliveries", "recovery", job, "--resume"], env)
        assert.strictEqual(resumed.code, 0, resumed.stderr)
        const lines = resumed.stdout.trim().split("\n")
        assert.match(lines.at(-1)!, /^\[#{30}\] 100% 24\/24 examined, 24 resent, 0 skipped \(done\)$/)
        yield* eventually(delivered(subs), (n) => n === 24, { what: "everything delivered", ...wait })
        worker.child.kill("SIGTERM")
        yield* worker.exited
        assert.strictEqual(receiver.log.length, 24)
      }).pipe(Effect.scoped),
    { timeout: 120_000 },
  )
})
