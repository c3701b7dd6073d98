import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { SqlClient } from "effect/sql"
import { deliverKind } from "../../src/push/PushJob.ts"
import * as PushMessageKey from "../../src/push/PushMessageKey.ts"
import type * as PushService from "../../testkit/PushService.ts"
import * as NodeProcess from "../support/NodeProcess.ts"
import * as PushWorkerProcess from "../support/PushWorkerProcess.ts"
import { member } from "../support/TestPushWorker.ts"

interface PushJobRow {
  /** The registrations the job's args name (as last recorded). */
  readonly registrations: ReadonlyArray<string>
  readonly state: string
  readonly attempt: number
  readonly errorKinds: ReadonlyArray<string>
}

const pushJobs = Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => sql<PushJobRow>`
    SELECT args -> 'registrations' AS registrations, state::text AS state, attempt,
           coalesce((SELECT jsonb_agg(e ->> 'kind') FROM jsonb_array_elements(errors) AS e), '[]') AS "errorKinds"
    FROM jobs WHERE kind = ${deliverKind} ORDER BY id`,
)

/** What a device reads of one message: the `Topic` header and the envelope's `id`, `tag` and `event`. */
const identity = (message: PushService.Delivered) => {
  const envelope = JSON.parse(message.plaintext) as { id?: string; tag?: string; event?: string }
  return { topic: message.headers.topic, id: envelope.id, tag: envelope.tag, event: envelope.event }
}

describe("push messages sent again after a worker is killed", () => {
  it.live(
    "PushResendCarriesSameKey: a worker SIGKILLed while the push service holds its requests; after its lease lapses a second worker sends each message again with the same Topic, tag and id, derived from (epoch, registration, event)",
    () =>
      Effect.gen(function* () {
        const { service, host, env } = yield* PushWorkerProcess.world("push_resend")
        // Two browsers: the key must tell their messages of one event apart.
        const browsers = yield* member(service, "team", "ann", 2).pipe(Effect.provide(host))
        for (const b of browsers) service.script(b.browser.id, [{ hang: true }])

        const first = yield* NodeProcess.start(NodeProcess.bothy, ["worker"], env)
        yield* first.waitFor(/worker running \(consumers: webhooks, push;/)
        const { epoch, seq } = yield* PushWorkerProcess.appendOne.pipe(Effect.provide(host))

        // Both requests reached the push service, which holds them unanswered: kill the worker now.
        const held = yield* service.take(2)
        first.child.kill("SIGKILL")
        assert.strictEqual((yield* first.exited).signal, "SIGKILL")
        const orphaned = yield* pushJobs.pipe(Effect.provide(host))
        // One job carries the event to both registrations.
        assert.deepStrictEqual(
          orphaned.map((j) => [j.state, j.registrations.length]),
          [["running", 2]],
          "the killed worker left its job running, both registrations still to send",
        )

        // The second worker rescues them once the first one's lease has lapsed, and sends again (201).
        const second = yield* NodeProcess.start(NodeProcess.bothy, ["worker"], env)
        yield* second.waitFor(/worker running/)
        const resent = yield* service.take(2)
        const jobs = yield* pushJobs.pipe(Effect.provide(host))
        for (const job of jobs) {
          assert.include(job.errorKinds, "rescued", "the job was rescued")
          assert.strictEqual(job.attempt, 2)
        }

        for (const { registration, browser } of browsers) {
          const before = held.filter((m) => m.subscriptionId === browser.id)
          const after = resent.filter((m) => m.subscriptionId === browser.id)
          assert.strictEqual(before.length, 1, `one held message to ${browser.id}`)
          assert.strictEqual(after.length, 1, `one re-sent message to ${browser.id}`)
          const key = PushMessageKey.make(epoch, registration, seq)
          const expected = { topic: PushMessageKey.topic(key), id: key, tag: key, event: `${epoch}.${seq}` }
          assert.deepStrictEqual(identity(before[0]!), expected, `the first copy to registration ${registration}`)
          assert.deepStrictEqual(identity(after[0]!), expected, `the re-sent copy to registration ${registration}`)
          assert.match(expected.topic, /^[A-Za-z0-9_-]{1,32}$/, "RFC 8030 topic: at most 32 URL-safe base64 characters")
        }
        const [a, b] = browsers.map(({ registration }) => PushMessageKey.make(epoch, registration, seq))
        assert.notStrictEqual(a, b, "one key per registration")
        assert.notStrictEqual(PushMessageKey.topic(a!), PushMessageKey.topic(b!))
        assert.strictEqual(service.log.rejected.length, 0)
        service.release()
      }).pipe(Effect.scoped),
    120_000,
  )
})
