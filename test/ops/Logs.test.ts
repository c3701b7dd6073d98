import { randomBytes } from "node:crypto"
import { assert, layer } from "@effect/vitest"
import { Effect, Redacted } from "effect"
import { WebhookSubscriptions } from "../../src/webhooks/subscriptions/WebhookSubscriptions.ts"
import * as WebhookReceiver from "../../testkit/WebhookReceiver.ts"
import * as NodeProcess from "../support/NodeProcess.ts"
import { TestDatabase } from "../support/TestDatabase.ts"
import * as TestWebhooks from "../support/TestWebhooks.ts"
import * as WorkerProcess from "../support/WorkerProcess.ts"

const key = WorkerProcess.rawKey()

const Live = TestWebhooks.layer({ secretKey: key })

/** A secret-looking path segment: a receiver URL's path may hold a token, and logs name origins only. */
const token = () => `tok_${randomBytes(12).toString("hex")}`

layer(Live, { excludeTestServices: true })("the worker's logs", (it) => {
  it.effect(
    "LogsNeverHoldSecrets: a worker at log level all, delivering, redirected, disabling, writes JSON lines holding no key, signing secret or URL token",
    () =>
      Effect.gen(function* () {
        const webhooks = yield* WebhookSubscriptions
        const tokens = { ok: token(), gone: token(), moved: token() }
        const receiver = yield* WebhookReceiver.start(({ path }) =>
          path.startsWith("/gone")
            ? { status: 410 }
            : path.startsWith("/moved")
              ? { status: 302, headers: { location: `/elsewhere/${tokens.moved}` } }
              : { status: 200 },
        )
        const ok = yield* TestWebhooks.subscribe("log-owner", receiver.url(`/ok/${tokens.ok}`), ["log-ok"])
        const gone = yield* TestWebhooks.subscribe("log-owner", receiver.url(`/gone/${tokens.gone}`), ["log-gone"])
        // A redirect is not followed, and the operator hears of it, by origin.
        const moved = yield* TestWebhooks.subscribe("log-owner", receiver.url(`/moved/${tokens.moved}`), ["log-moved"])
        const rotated = yield* webhooks.rotateSecret(ok.id)
        const secrets = [key, ...[ok.secret, gone.secret, moved.secret, rotated].map(Redacted.value)]

        const worker = yield* WorkerProcess.start(key, { BOTHY_LOG_LEVEL: "all" })
        for (const space of ["log-ok", "log-gone", "log-moved"]) yield* TestWebhooks.append(space, { space })
        yield* worker.process.waitFor(new RegExp(`subscription ${gone.id} disabled with cause gone`))
        yield* worker.process.waitFor(new RegExp(`subscription ${moved.id} .*redirects are not followed`))
        worker.process.child.kill("SIGTERM")
        const finished = yield* worker.process.exited
        assert.strictEqual(finished.code, 0, finished.stderr)

        // A second worker with another key refuses to start; its one line names key ids only.
        const other = WorkerProcess.rawKey()
        const { url } = yield* TestDatabase
        const refused = yield* NodeProcess.run(NodeProcess.bothy, ["worker"], {
          DATABASE_URL: url,
          BOTHY_WEBHOOK_SECRET_KEY: other,
          BOTHY_LOG_LEVEL: "all",
        })
        assert.strictEqual(refused.code, 1)
        assert.include(refused.stderr, "BOTHY_WEBHOOK_SECRET_KEY")

        const lines = finished.stdout.split("\n").filter((l) => l.length > 0)
        assert.isAbove(lines.length, 5)
        for (const line of lines) {
          const entry = JSON.parse(line) as { level: string; message: unknown; timestamp: string }
          assert.isString(entry.level, line)
          assert.isString(entry.timestamp, line)
        }
        const everything = [finished.stdout, finished.stderr, refused.stdout, refused.stderr].join("\n")
        assert.include(everything, "disabled with cause gone", "the state change is on record")
        for (const secret of [...secrets, other]) assert.notInclude(everything, secret)
        for (const t of Object.values(tokens)) assert.notInclude(everything, t)
      }).pipe(Effect.scoped),
  )
})
