/**
 * The real `bothy worker` refusing to start: one line on stderr, exit 1, and nothing started.
 */
import { randomBytes } from "node:crypto"
import { chmodSync, existsSync, mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { PgClient } from "@effect/sql-pg"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Redacted } from "effect"
import { SqlClient } from "effect/sql"
import * as SecretBox from "../../src/crypto/SecretBox.ts"
import * as NodeProcess from "../support/NodeProcess.ts"
import * as TestDatabase from "../support/TestDatabase.ts"

const tempHome = Effect.acquireRelease(
  Effect.sync(() => {
    const dir = mkdtempSync(join(tmpdir(), "bothy-refusal-"))
    chmodSync(dir, 0o755)
    return dir
  }),
  (dir) => Effect.sync(() => rmSync(dir, { recursive: true, force: true })),
)

const freshDatabase = Effect.map(TestDatabase.cloneForProcesses("refusal"), (db) => db.url)

const stderrLines = (out: NodeProcess.Finished) => out.stderr.split("\n").filter((l) => l.trim().length > 0)

const rawKey = () => randomBytes(32).toString("base64")

describe("bothy worker refusals", () => {
  it.live(
    "EmptyVariableIsAnError: bothy worker with DATABASE_URL= exits 1 with one line naming it and starts no server",
    () =>
      Effect.gen(function* () {
        const home = join(yield* tempHome, "state")
        const out = yield* NodeProcess.run(NodeProcess.bothy, ["worker"], { DATABASE_URL: "", BOTHY_HOME: home })
        assert.strictEqual(out.code, 1, out.stderr)
        const lines = stderrLines(out)
        assert.strictEqual(lines.length, 1, out.stderr)
        assert.strictEqual(
          lines[0],
          "bothy: invalid configuration: DATABASE_URL is set but empty; unset it to run an embedded PostgreSQL, or give a value",
        )
        assert.notMatch(out.stdout, /embedded|listening/)
        assert.isFalse(existsSync(home), "nothing written under BOTHY_HOME: no server, no key file")
      }).pipe(Effect.scoped),
  )

  it.live(
    "WorkerRefusesWrongSealingKey: two workers starting at once with one key both run; a worker with another key exits 1 with one line naming BOTHY_WEBHOOK_SECRET_KEY and both key ids",
    () =>
      Effect.gen(function* () {
        const url = yield* freshDatabase
        const shared = rawKey()
        const sharedId = (yield* SecretBox.parseKey(Redacted.make(shared))).id
        const env = (key: string) => ({ DATABASE_URL: url, BOTHY_WEBHOOK_SECRET_KEY: key })

        const first = yield* NodeProcess.start(NodeProcess.bothy, ["worker"], env(shared))
        const second = yield* NodeProcess.start(NodeProcess.bothy, ["worker"], env(shared))
        yield* Effect.all([first.waitFor(/worker running/), second.waitFor(/worker running/)], {
          concurrency: "unbounded",
        })
        for (const worker of [first, second]) {
          worker.child.kill("SIGTERM")
          assert.strictEqual((yield* worker.exited).code, 0)
        }

        const other = rawKey()
        const otherId = (yield* SecretBox.parseKey(Redacted.make(other))).id
        const out = yield* NodeProcess.run(NodeProcess.bothy, ["worker"], env(other))
        assert.strictEqual(out.code, 1, out.stderr)
        const lines = stderrLines(out)
        assert.strictEqual(lines.length, 1, out.stderr)
        assert.strictEqual(
          lines[0],
          `bothy: BOTHY_WEBHOOK_SECRET_KEY is key ${otherId}, but this database's webhook secrets are sealed under key ${sharedId}: every worker, and every process that creates subscriptions, on one database needs the same BOTHY_WEBHOOK_SECRET_KEY`,
        )
        assert.notMatch(out.stdout, /worker running/)
        assert.notInclude(out.stdout + out.stderr, other, "the key itself is never printed")

        const recorded = yield* Effect.flatMap(
          SqlClient.SqlClient,
          (sql) => sql<{ keyId: string }>`SELECT key_id AS "keyId" FROM webhook_sealing_key`,
        ).pipe(Effect.provide(PgClient.layer({ url: Redacted.make(url), maxConnections: 1 })))
        assert.deepStrictEqual(recorded, [{ keyId: sharedId }])
      }).pipe(Effect.scoped),
    120_000,
  )
})
