/**
 * The admin API as `bothy worker` serves it: the real process, configured from its environment.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as NodeProcess from "../support/NodeProcess.ts"
import * as TestAdmin from "../support/TestAdmin.ts"
import * as TestDatabase from "../support/TestDatabase.ts"
import * as WorkerProcess from "../support/WorkerProcess.ts"

describe("the worker's admin server", () => {
  it.live(
    "AdminApiRequiresToken: bothy worker serves the admin API on BOTHY_ADMIN_ADDRESS behind BOTHY_ADMIN_TOKEN, and without a token refuses a non-loopback address in one line",
    () =>
      Effect.gen(function* () {
        const { url } = yield* TestDatabase.cloneForProcesses("admin_worker")
        const env = { DATABASE_URL: url, BOTHY_WEBHOOK_SECRET_KEY: WorkerProcess.rawKey() }

        const refused = yield* NodeProcess.run(NodeProcess.bothy, ["worker"], {
          ...env,
          BOTHY_ADMIN_ADDRESS: "0.0.0.0:0",
        })
        assert.strictEqual(refused.code, 1, refused.stderr)
        assert.deepStrictEqual(refused.stderr.trim().split("\n"), [
          "bothy: the admin API would be open to anyone on 0.0.0.0:0: set BOTHY_ADMIN_TOKEN (admin.token), or listen on a loopback address (BOTHY_ADMIN_ADDRESS, admin.address)",
        ])
        assert.notMatch(refused.stdout, /admin API served/)

        const worker = yield* NodeProcess.start(NodeProcess.bothy, ["worker"], {
          ...env,
          BOTHY_ADMIN_TOKEN: "worker-admin-token",
        })
        const served = yield* worker.waitFor(/admin API served on /)
        const base = /admin API served on (http:\/\/[^\s"]+) \(console: /.exec(served)![1]!
        assert.notInclude(worker.stdout(), "worker-admin-token")
        assert.strictEqual((yield* TestAdmin.client(base).get("/v1/consumers")).status, 401)
        const consumers = yield* TestAdmin.client(base, { token: "worker-admin-token" }).get("/v1/consumers")
        assert.strictEqual(consumers.status, 200)
        assert.includeMembers(
          consumers.body.map((c: { name: string }) => c.name),
          ["webhooks", "push"],
        )
        assert.strictEqual((yield* TestAdmin.call(base, "GET", "/docs")).status, 200)
        // The status page is the operator's too.
        assert.strictEqual((yield* TestAdmin.call(base, "GET", "/")).status, 401)
        const page = yield* TestAdmin.call(base, "GET", "/", { token: "worker-admin-token" })
        assert.strictEqual(page.status, 200)
        assert.include(String(page.body), "Consumers")
      }).pipe(Effect.scoped),
    { timeout: 120_000 },
  )
})
