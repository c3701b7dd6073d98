/**
 * A request a worker sent and never recorded (SIGKILLed between the receiver's answer and the
 * record) must not read as "never sent", whatever happens to the delivery next.
 */
import { assert, layer } from "@effect/vitest"
import { Effect, Queue } from "effect"
import { SqlClient } from "effect/sql"
import * as PermissionGrants from "../../../src/authz/PermissionGrants.ts"
import { webhookDeliver } from "../../../src/authz/Permissions.ts"
import { outcomeUnknown } from "../../../src/webhooks/drain/DeliveriesInDoubt.ts"
import * as WebhookReceiver from "../../../testkit/WebhookReceiver.ts"
import * as TestWebhooks from "../../support/TestWebhooks.ts"
import * as WorkerProcess from "../../support/WorkerProcess.ts"

const key = WorkerProcess.rawKey()

layer(TestWebhooks.layer({ secretKey: key }), { excludeTestServices: true })("deliveries in doubt", (it) => {
  it.effect(
    "DeliveryInDoubtIsRecorded: a request answered before a SIGKILL, then a revocation: one attempt, outcome unknown, not recorded as never sent",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        // The receiver holds its 200 until the worker that sent the request is dead.
        let answer!: () => void
        const killed = new Promise<void>((resolve) => {
          answer = resolve
        })
        const receiver = yield* WebhookReceiver.start(() => ({ status: 200, after: killed }))
        const subscription = yield* TestWebhooks.subscribe("doubt-owner", receiver.url("/hook"), ["doubt"])

        const worker = yield* WorkerProcess.start(key)
        yield* TestWebhooks.append("doubt", { i: 1 })
        const first = yield* Queue.take(receiver.received)
        worker.process.child.kill("SIGKILL")
        yield* worker.process.exited
        answer()

        yield* PermissionGrants.revoke("doubt-owner", webhookDeliver, "doubt")
        // Another worker (in this process) takes the drain job over once the dead one's lease lapses.
        const signals = yield* TestWebhooks.signals
        yield* TestWebhooks.startDrainers(signals)
        yield* signals.until(
          Effect.map(TestWebhooks.deliveries(subscription.id), (rows) => rows.every((d) => d.state !== "pending")),
        )

        const [delivery] = yield* TestWebhooks.deliveries(subscription.id)
        assert.deepStrictEqual(
          { ...delivery },
          { i: 1, state: "dead", deadReason: "permission", sequence: 1n, attempts: 1 },
        )
        const attempts = yield* sql<{ number: number; status: number | null; errorClass: string | null }>`
          SELECT a.number, a.status, a.error_class AS "errorClass"
          FROM webhook_attempts AS a JOIN webhook_deliveries AS d ON d.id = a.delivery_id
          WHERE d.subscription_id = ${subscription.id}::uuid`
        assert.deepStrictEqual(
          attempts.map((a) => ({ ...a })),
          [{ number: 1, status: null, errorClass: outcomeUnknown }],
        )
        // Nothing went out after the revocation: the receiver got the one request.
        assert.strictEqual(receiver.log.length, 1)
        assert.strictEqual(first.path, "/hook")
      }).pipe(Effect.scoped),
    90_000,
  )
})
