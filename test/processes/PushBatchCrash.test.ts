import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { SqlClient } from "effect/sql"
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
})
