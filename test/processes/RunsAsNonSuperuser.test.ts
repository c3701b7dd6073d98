/**
 * bothy as a managed service runs it: `bothy migrate` and `bothy worker` as a role that owns its
 * database but is not superuser, may not create databases or roles, and holds no predefined role
 * (no `pg_read_all_stats`, no `pg_signal_backend`). The grants it gets are the ones
 * docs/operations.md tells an operator to give.
 */
import { assert, layer } from "@effect/vitest"
import { Effect, Layer, Queue, Redacted } from "effect"
import { SqlClient } from "effect/sql"
import * as SecretBox from "../../src/crypto/SecretBox.ts"
import * as WebhookReceiver from "../../testkit/WebhookReceiver.ts"
import * as NodeProcess from "../support/NodeProcess.ts"
import * as OwnedDatabase from "../support/OwnedDatabase.ts"
import * as TestDatabase from "../support/TestDatabase.ts"
import * as TestWebhooks from "../support/TestWebhooks.ts"
import * as WorkerProcess from "../support/WorkerProcess.ts"

/** Lines a process wrote that say something was refused or is off. */
const complaints = (text: string) =>
  text
    .split("\n")
    .filter((line) =>
      /permission denied|must be superuser|must be owner|"level":"(WARN|ERROR)"|\b(WARN|ERROR)\b/i.test(line),
    )

/**
 * `OwnedDatabase.make`, migrated by `bothy migrate` as its role (which must complain of nothing), and a
 * way to start `bothy worker` there as that role.
 */
const migratedAsRole = Effect.gen(function* () {
  const owned = yield* OwnedDatabase.make
  const migrated = yield* NodeProcess.run(NodeProcess.bothy, ["migrate"], { DATABASE_URL: owned.url })
  assert.strictEqual(migrated.code, 0, migrated.stderr)
  assert.deepStrictEqual(complaints(migrated.stdout + migrated.stderr), [])
  const startWorker = (key: string, env: Record<string, string> = {}) =>
    WorkerProcess.start(key, { DATABASE_URL: owned.url, ...env }).pipe(
      Effect.provideService(
        TestDatabase.TestDatabase,
        TestDatabase.TestDatabase.of({ ...owned, directUrl: owned.url }),
      ),
    )
  return { ...owned, startWorker }
})

layer(Layer.empty, { excludeTestServices: true })("least privilege", (it) => {
  it.effect(
    "RunsAsNonSuperuser: migrate and worker as the database's owning role, not superuser: every event delivered, nothing refused",
    () =>
      Effect.gen(function* () {
        const owned = yield* migratedAsRole
        const key = WorkerProcess.rawKey()
        const worker = yield* owned.startWorker(key)
        const services = yield* Layer.build(
          TestWebhooks.layerAt(owned.name, {
            secretKey: yield* SecretBox.parseKey(Redacted.make(key)),
            url: owned.url,
          }),
        )
        yield* Effect.gen(function* () {
          const sql = yield* SqlClient.SqlClient
          const [me] = yield* sql<{
            superuser: boolean
          }>`SELECT rolsuper AS superuser FROM pg_roles WHERE rolname = current_user`
          assert.isFalse(me!.superuser, "the test's own session is the unprivileged role too")
          const receiver = yield* WebhookReceiver.start(() => ({ status: 200 }))
          yield* TestWebhooks.subscribe("owner", receiver.url("/hook"), ["space"])
          for (let i = 1; i <= 5; i++) yield* TestWebhooks.append("space", { i })
          const got: Array<number> = []
          while (got.length < 5) {
            const request = yield* Queue.take(receiver.received)
            got.push(TestWebhooks.envelope(request).data.i)
          }
          assert.deepStrictEqual(got, [1, 2, 3, 4, 5])
        }).pipe(Effect.provide(services))
        assert.deepStrictEqual(complaints(worker.process.stdout()), [])
      }).pipe(Effect.scoped),
    120_000,
  )

  it.effect(
    "RunsAsNonSuperuserSaysWhatIsOff: without pg_read_all_stats, a post_commit worker says in one line which gauge sees less",
    () =>
      Effect.gen(function* () {
        const owned = yield* migratedAsRole
        const worker = yield* owned.startWorker(WorkerProcess.rawKey(), { BOTHY_LOG_SEQUENCING: "post_commit" })
        const line = yield* worker.process.waitFor(/without pg_read_all_stats/)
        assert.include(line, "bothy.event.log.open_append_age counts only this role's open appends")
      }).pipe(Effect.scoped),
    120_000,
  )
})
