import { randomBytes } from "node:crypto"
import { existsSync } from "node:fs"
import { join } from "node:path"
import { PgClient } from "@effect/sql-pg"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Queue, Redacted } from "effect"
import { SqlClient } from "effect/sql"
import { Webhook } from "standardwebhooks"
import { inject } from "vitest"
import * as PermissionGrants from "../../src/authz/PermissionGrants.ts"
import { webhookDeliver } from "../../src/authz/Permissions.ts"
import * as SecretBox from "../../src/crypto/SecretBox.ts"
import * as JobLease from "../../src/jobs/JobLease.ts"
import { EventLog } from "../../src/log/EventLog.ts"
import * as Migrations from "../../src/platform/Migrations.ts"
import { WebhookSubscriptions } from "../../src/webhooks/subscriptions/WebhookSubscriptions.ts"
import { WebhookConfig } from "../../src/webhooks/WebhookConfig.ts"
import * as EmbeddedServer from "../../testkit/EmbeddedServer.ts"
import * as WebhookReceiver from "../../testkit/WebhookReceiver.ts"
import * as EmbeddedWorker from "../support/EmbeddedWorker.ts"
import * as NodeProcess from "../support/NodeProcess.ts"
import { adminSql, codeUrl } from "../support/TestDatabase.ts"

/** A database of its own for the command, dropped with the scope: a clone of the migrated template, or empty. */
const scratchDatabase = (prefix: string, from: "template" | "empty") =>
  Effect.gen(function* () {
    const name = `${prefix}_${process.pid}_${Date.now()}`
    const template = from === "template" ? ` TEMPLATE "${inject("pgTemplate")}"` : ""
    yield* Effect.acquireRelease(adminSql(`CREATE DATABASE "${name}"${template}`), () =>
      adminSql(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`).pipe(Effect.ignore),
    )
    return codeUrl(name)
  })

describe("bothy command", () => {
  it.live("--help lists the commands", () =>
    Effect.gen(function* () {
      const out = yield* NodeProcess.run(NodeProcess.bothy, ["--help"])
      assert.strictEqual(out.code, 0)
      assert.match(out.stdout, /worker/)
      assert.match(out.stdout, /migrate/)
    }),
  )

  it.live("a bare `bothy` prints its help and exits 0, with nothing on stderr", () =>
    Effect.gen(function* () {
      const out = yield* NodeProcess.run(NodeProcess.bothy, [])
      assert.strictEqual(out.code, 0, out.stderr)
      assert.match(out.stdout, /SUBCOMMANDS[\s\S]*worker[\s\S]*migrate/)
      assert.strictEqual(out.stderr, "")
    }),
  )

  it.live("BOTHY_LOG_LEVEL sets the log level, --log-level overrides it, and a bad value is one line naming it", () =>
    Effect.gen(function* () {
      const url = yield* scratchDatabase("t_cli_l", "template")
      const quiet = yield* NodeProcess.run(NodeProcess.bothy, ["migrate"], {
        DATABASE_URL: url,
        BOTHY_LOG_LEVEL: "warn",
      })
      assert.strictEqual(quiet.code, 0, quiet.stderr)
      assert.strictEqual(quiet.stdout, "", "info lines are below warn")
      const flag = yield* NodeProcess.run(NodeProcess.bothy, ["--log-level", "info", "migrate"], {
        DATABASE_URL: url,
        BOTHY_LOG_LEVEL: "warn",
      })
      assert.match(flag.stdout, /schema is current/)
      const bad = yield* NodeProcess.run(NodeProcess.bothy, ["migrate"], { DATABASE_URL: url, BOTHY_LOG_LEVEL: "loud" })
      assert.strictEqual(bad.code, 1)
      assert.match(
        bad.stderr,
        /^bothy: invalid configuration: BOTHY_LOG_LEVEL \(log_level\) = "loud": expected one of all, trace, debug, info, warn, warning, error, fatal, none\n$/,
      )
    }).pipe(Effect.scoped),
  )

  it.live("migrate applies the migrations to DATABASE_URL once; a second run is a no-op", () =>
    Effect.gen(function* () {
      const url = yield* scratchDatabase("t_cli", "empty")
      const first = yield* NodeProcess.run(NodeProcess.bothy, ["migrate"], { DATABASE_URL: url })
      assert.strictEqual(first.code, 0, first.stderr)
      assert.include(first.stdout, `applied migrations: ${Object.keys(Migrations.migrations).join(", ")}`)
      assert.notMatch(first.stdout, /embedded/, "DATABASE_URL set: no embedded server")
      const second = yield* NodeProcess.run(NodeProcess.bothy, ["migrate"], { DATABASE_URL: url })
      assert.strictEqual(second.code, 0, second.stderr)
      assert.match(second.stdout, /schema is current/)
      const rows = yield* Effect.flatMap(
        SqlClient.SqlClient,
        (sql) => sql<{ n: number }>`SELECT count(*)::int AS n FROM bothy_migrations`,
      ).pipe(Effect.provide(PgClient.layer({ url: Redacted.make(url), maxConnections: 1 })))
      assert.strictEqual(rows[0]!.n, Object.keys(Migrations.migrations).length)
    }).pipe(Effect.scoped),
  )

  it.live(
    "RestoreFinalizeSetsCursorsToHead: `bothy restore finalize` on DATABASE_URL prints what it changed, and is refused in one line while a worker's lease is live",
    () =>
      Effect.gen(function* () {
        const url = yield* scratchDatabase("t_cli_r", "template")
        const Db = PgClient.layer({ url: Redacted.make(url), maxConnections: 1 })
        const head = yield* Effect.gen(function* () {
          const log = yield* EventLog
          yield* log.append([{ space: "s", type: "item.created", actor: "a", payload: {} }])
          return yield* Effect.flatMap(
            log.append([{ space: "s", type: "item.created", actor: "a", payload: {} }]),
            log.sequenced,
          )
        }).pipe(Effect.provide(EventLog.layer.pipe(Layer.provideMerge(Db))))
        const out = yield* NodeProcess.run(NodeProcess.bothy, ["restore", "finalize"], { DATABASE_URL: url })
        assert.strictEqual(out.code, 0, out.stderr)
        const epoch = /epoch 1 -> (\d+) \(head seq 2: the seqs after it are numbered in epoch \1\)/.exec(out.stdout)
        assert.isNotNull(epoch, out.stdout)
        assert.include(out.stdout, "cursor push: 0 -> 2")
        assert.include(out.stdout, "cursor webhooks: 0 -> 2")
        const [row] = yield* Effect.flatMap(
          SqlClient.SqlClient,
          (sql) => sql<{ epoch: number; at: number }>`
            SELECT s.epoch, (SELECT count(*)::int FROM event_consumer_cursors WHERE last_seq = s.value) AS at
            FROM event_seq AS s`,
        ).pipe(Effect.provide(Db))
        assert.deepStrictEqual(row, { epoch: Number(epoch![1]), at: 2 })
        assert.strictEqual(head.lastSeq, 2n)

        yield* JobLease.renew("worker-1", 60_000).pipe(Effect.provide(Db))
        const refused = yield* NodeProcess.run(NodeProcess.bothy, ["restore", "finalize"], { DATABASE_URL: url })
        assert.strictEqual(refused.code, 1)
        assert.match(
          refused.stderr,
          /^bothy: workers hold live leases \(worker-1, until [^)]+\): stop every bothy worker/,
        )
        assert.strictEqual(refused.stderr.trim().split("\n").length, 1, refused.stderr)
      }).pipe(Effect.scoped),
  )

  it.live(
    "`bothy restore finalize` without DATABASE_URL finalizes the embedded server's database",
    () =>
      Effect.gen(function* () {
        const home = yield* EmbeddedWorker.home
        const port = String(yield* EmbeddedServer.freePort)
        const env = { BOTHY_HOME: home, BOTHY_EMBEDDED_PORT: port }
        const first = yield* NodeProcess.run(NodeProcess.bothy, ["restore", "finalize"], env)
        assert.strictEqual(first.code, 0, first.stderr)
        assert.match(first.stdout, /embedded PostgreSQL 18 listening/)
        assert.match(first.stdout, /epoch 1 -> \d+ \(head seq 0/)
        const second = yield* NodeProcess.run(NodeProcess.bothy, ["restore", "finalize"], env)
        assert.strictEqual(second.code, 0, second.stderr)
        assert.match(second.stdout, /cursor webhooks: at 0 already/)
      }).pipe(Effect.scoped),
    120_000,
  )

  it.live("a bad setting stops the worker with one line naming the key, before any server starts", () =>
    Effect.gen(function* () {
      const home = yield* EmbeddedWorker.home
      const out = yield* NodeProcess.run(NodeProcess.bothy, ["worker"], {
        BOTHY_HOME: home,
        BOTHY_CONSUMER_BATCH_SIZE: "lots",
      })
      assert.strictEqual(out.code, 1)
      const lines = out.stderr.split("\n").filter((l) => l.trim().length > 0)
      assert.strictEqual(lines.length, 1, out.stderr)
      assert.match(lines[0]!, /BOTHY_CONSUMER_BATCH_SIZE \(consumer\.batch_size\) = "lots"/)
      assert.isFalse(existsSync(home), "no embedded server was initialised")
    }).pipe(Effect.scoped),
  )

  it.live(
    "without DATABASE_URL the worker runs an embedded PostgreSQL and SIGTERM or SIGINT stop both cleanly",
    () =>
      Effect.gen(function* () {
        const home = yield* EmbeddedWorker.home
        for (const signal of ["SIGTERM", "SIGINT"] as const) {
          const { worker, port } = yield* EmbeddedWorker.start({ BOTHY_HOME: home }, { detached: false })
          const { dataDir, postmaster } = yield* EmbeddedWorker.running(worker)
          assert.strictEqual(dataDir, join(home, "pg"))
          assert.match(worker.stdout(), new RegExp(`embedded PostgreSQL 18 listening on 127\\.0\\.0\\.1:${port}`))
          assert.isTrue(NodeProcess.groupAlive(postmaster))
          worker.child.kill(signal)
          const out = yield* worker.exited
          assert.strictEqual(out.code, 0, `${signal}: ${out.stderr}`)
          assert.isFalse(NodeProcess.groupAlive(postmaster), `${signal}: the embedded server stopped`)
          assert.isFalse(existsSync(join(dataDir, "postmaster.pid")), `${signal}: clean shutdown`)
        }
      }).pipe(Effect.scoped),
    120_000,
  )

  it.live("the worker delivers a signed webhook end to end: append, webhooks consumer, delivery job, receiver", () =>
    Effect.gen(function* () {
      const url = yield* scratchDatabase("t_cli_w", "template")
      const rawKey = randomBytes(32).toString("base64")
      const receiver = yield* WebhookReceiver.start(() => ({ status: 200 }))
      const Db = PgClient.layer({ url: Redacted.make(url), maxConnections: 2 })
      const secretKey = yield* SecretBox.parseKey(Redacted.make(rawKey))
      const services = WebhookSubscriptions.layer.pipe(
        Layer.provideMerge(EventLog.layer),
        Layer.provideMerge(
          WebhookConfig.layerWith({ secretKey, policy: { allowHttpLoopback: true, allowCidrs: [], allowHosts: [] } }),
        ),
        Layer.provideMerge(Db),
      )
      const sub = yield* Effect.gen(function* () {
        yield* PermissionGrants.grant("cli-owner", webhookDeliver, "cli-space")
        return yield* (yield* WebhookSubscriptions).create({
          owner: "cli-owner",
          url: receiver.url("/cli"),
          scope: ["cli-space"],
          eventTypes: [],
        })
      }).pipe(Effect.provide(services))
      const worker = yield* NodeProcess.start(NodeProcess.bothy, ["worker"], {
        DATABASE_URL: url,
        BOTHY_WEBHOOK_SECRET_KEY: rawKey,
        BOTHY_WEBHOOK_ALLOW_HTTP_LOOPBACK: "true",
      })
      yield* worker.waitFor(/worker running/)
      yield* Effect.flatMap(EventLog, (log) =>
        log.append([{ space: "cli-space", type: "cli.tested", actor: "cli", payload: { ok: true } }]),
      ).pipe(Effect.provide(services))
      const got = yield* Queue.take(receiver.received).pipe(Effect.timeout("30 seconds"))
      new Webhook(Redacted.value(sub.secret)).verify(got.body, got.headers as Record<string, string>)
      assert.deepStrictEqual(JSON.parse(got.body).data, { ok: true })
      worker.child.kill("SIGTERM")
      assert.strictEqual((yield* worker.exited).code, 0)
    }).pipe(Effect.scoped),
  )
})
