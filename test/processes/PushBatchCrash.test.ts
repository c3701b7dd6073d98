import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { SqlClient } from "effect/sql"
import * as PermissionGrants from "../../src/authz/PermissionGrants.ts"
import { pushDeliver } from "../../src/authz/Permissions.ts"
import { deliverKind } from "../../src/push/PushJob.ts"
import * as PushMessageKey from "../../src/push/PushMessageKey.ts"
import { eventually } from "../support/Eventually.ts"
import * as NodeProcess from "../support/NodeProcess.ts"
import * as PushWorkerProcess from "../support/PushWorkerProcess.ts"
import { member } from "../support/TestPushWorker.ts"

interface BatchRow {
  readonly registrations: ReadonlyArray<string>
  readonly state: string
  readonly attempt: number
  readonly errorKinds: ReadonlyArray<string>
}

const batchJobs = Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => sql<BatchRow>`
    SELECT args -> 'registrations' AS registrations, state::text AS state, attempt,
           coalesce((SELECT jsonb_agg(e ->> 'kind') FROM jsonb_array_elements(errors) AS e), '[]') AS "errorKinds"
    FROM jobs WHERE kind = ${deliverKind} ORDER BY id`,
)

const deadRecorded = Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => sql<{ registrations: ReadonlyArray<string>; dead: Record<string, string> | null }>`
    SELECT args -> 'registrations' AS registrations, args -> 'dead' AS dead FROM jobs WHERE kind = ${deliverKind}`,
)

const lastError = Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => sql<{ message: string }>`
    SELECT errors -> -1 ->> 'message' AS message FROM jobs WHERE kind = ${deliverKind} ORDER BY id`,
)

const sorted = (ids: ReadonlyArray<string>) => [...ids].sort()

describe("a push batch whose worker is killed mid-send", () => {
  it.live(
    "PushBatchCrashMidSendNoDuplicates: a worker SIGKILLed with three of a batch's six messages accepted and recorded and three held unanswered; the second worker sends to the three held ones alone, with the same keys, and the push service accepts exactly one message per registration",
    () =>
      Effect.gen(function* () {
        const { service, host, env } = yield* PushWorkerProcess.world("push_batch_crash")
        const browsers = yield* member(service, "team", "ann", 6).pipe(Effect.provide(host))
        const held = browsers.filter((_, i) => i % 2 === 1)
        const accepted = browsers.filter((_, i) => i % 2 === 0)
        for (const b of held) service.script(b.browser.id, [{ hang: true }])

        const first = yield* NodeProcess.start(NodeProcess.bothy, ["worker"], env)
        yield* first.waitFor(/worker running \(consumers: webhooks, push;/)
        const { epoch, seq } = yield* PushWorkerProcess.appendOne.pipe(Effect.provide(host))

        // All six reached the push service: three answered 201, three held.
        const firstCopies = yield* service.take(6)
        assert.deepStrictEqual(
          sorted(firstCopies.filter((m) => m.status === 201).map((m) => m.subscriptionId)),
          sorted(accepted.map((b) => b.browser.id)),
        )
        // The job recorded the three accepted ones: only the held ones are left in its args.
        const heldRegistrations = sorted(held.map((b) => b.registration))
        yield* eventually(
          batchJobs.pipe(Effect.provide(host)),
          (jobs) => jobs.length === 1 && sorted(jobs[0]!.registrations).join() === heldRegistrations.join(),
          { what: "the job records the accepted registrations as settled", within: "20 seconds", every: "20 millis" },
        )
        first.child.kill("SIGKILL")
        assert.strictEqual((yield* first.exited).signal, "SIGKILL")
        const [orphaned] = yield* batchJobs.pipe(Effect.provide(host))
        assert.deepStrictEqual(
          [orphaned!.state, orphaned!.attempt, sorted(orphaned!.registrations)],
          ["running", 1, heldRegistrations],
          "killed mid-batch: the job is still running, the held registrations still to send",
        )

        // The second worker rescues the job and sends to the held registrations alone (201 now).
        const second = yield* NodeProcess.start(NodeProcess.bothy, ["worker"], env)
        yield* second.waitFor(/worker running/)
        const resent = yield* service.take(3)
        assert.deepStrictEqual(
          sorted(resent.map((m) => m.subscriptionId)),
          sorted(held.map((b) => b.browser.id)),
          "only the held registrations are sent again",
        )
        for (const { registration, browser } of held) {
          const key = PushMessageKey.make(epoch, registration, seq)
          const copies = [...firstCopies, ...resent].filter((m) => m.subscriptionId === browser.id)
          assert.deepStrictEqual(
            copies.map((m) => [m.headers.topic, JSON.parse(m.plaintext).id]),
            [
              [PushMessageKey.topic(key), key],
              [PushMessageKey.topic(key), key],
            ],
            `both copies to registration ${registration} carry its key`,
          )
        }
        const [done] = yield* eventually(
          batchJobs.pipe(Effect.provide(host)),
          (jobs) => jobs[0]?.state === "completed",
          { what: "the rescued job completes", within: "20 seconds", every: "20 millis" },
        )
        assert.strictEqual(done!.attempt, 2)
        assert.include(done!.errorKinds, "rescued")

        for (const { browser } of browsers) {
          const toIt = service.log.delivered.filter((m) => m.subscriptionId === browser.id)
          assert.strictEqual(
            toIt.filter((m) => m.status === 201).length,
            1,
            `${browser.id}: exactly one message accepted`,
          )
        }
        for (const { browser } of accepted) {
          assert.strictEqual(
            service.log.delivered.filter((m) => m.subscriptionId === browser.id).length,
            1,
            `${browser.id}: accepted and recorded, never sent again`,
          )
        }
        assert.strictEqual(service.log.delivered.length, 9)
        assert.strictEqual(service.log.rejected.length, 0)
        second.child.kill("SIGTERM")
        assert.strictEqual((yield* second.exited).code, 0)
      }).pipe(Effect.scoped),
    120_000,
  )
  it.live(
    "PushBatchDeathSurvivesCrash: a registration denied by an attempt SIGKILLed before it ended is named when the rescued job ends, so its job is cancelled naming it, not completed as if it were sent",
    () =>
      Effect.gen(function* () {
        const { service, host, env } = yield* PushWorkerProcess.world("push_batch_death_crash")
        const [sent, held] = yield* member(service, "team", "ann", 2).pipe(Effect.provide(host))
        const [denied] = yield* member(service, "team", "den").pipe(Effect.provide(host))
        yield* PermissionGrants.revoke("den", pushDeliver, "team").pipe(Effect.provide(host))
        service.script(held!.browser.id, [{ hang: true }])

        const first = yield* NodeProcess.start(NodeProcess.bothy, ["worker"], env)
        yield* first.waitFor(/worker running \(consumers: webhooks, push;/)
        yield* PushWorkerProcess.appendOne.pipe(Effect.provide(host))
        yield* service.take(2)
        const [recorded] = yield* eventually(
          deadRecorded.pipe(Effect.provide(host)),
          (jobs) => jobs.length === 1 && sorted(jobs[0]!.registrations).join() === held!.registration,
          {
            what: "the job records the sent and the denied registration as settled",
            within: "20 seconds",
            every: "20 millis",
          },
        )
        assert.deepStrictEqual(Object.keys(recorded!.dead ?? {}), [denied!.registration], "the death is in the args")
        first.child.kill("SIGKILL")
        assert.strictEqual((yield* first.exited).signal, "SIGKILL")

        const second = yield* NodeProcess.start(NodeProcess.bothy, ["worker"], env)
        yield* second.waitFor(/worker running/)
        const [resent] = yield* service.take(1)
        assert.strictEqual(resent!.subscriptionId, held!.browser.id)
        const [ended] = yield* eventually(
          batchJobs.pipe(Effect.provide(host)),
          (jobs) => jobs[0]?.state === "cancelled" || jobs[0]?.state === "completed",
          { what: "the rescued job ends", within: "20 seconds", every: "20 millis" },
        )
        assert.strictEqual(ended!.state, "cancelled")
        const [reason] = yield* lastError.pipe(Effect.provide(host))
        assert.include(reason!.message, `registration ${denied!.registration}: den lacks ${pushDeliver}`)
        assert.strictEqual(
          service.log.delivered.filter((m) => m.subscriptionId === denied!.browser.id).length,
          0,
          "nothing to the denied browser",
        )
        assert.strictEqual(service.log.delivered.filter((m) => m.subscriptionId === sent!.browser.id).length, 1)
        second.child.kill("SIGTERM")
        assert.strictEqual((yield* second.exited).code, 0)
      }).pipe(Effect.scoped),
    120_000,
  )
})
