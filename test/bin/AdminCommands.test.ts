import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { PgClient } from "@effect/sql-pg"
import { assert, describe, it } from "@effect/vitest"
import { Context, Effect, Layer, Redacted } from "effect"
import * as Migrations from "../../src/platform/Migrations.ts"
import * as EndpointServers from "../support/EndpointServers.ts"
import * as NodeProcess from "../support/NodeProcess.ts"
import * as TestDatabase from "../support/TestDatabase.ts"
import * as WorkerProcess from "../support/WorkerProcess.ts"

/** The real `bothy` against a database of its own, with no worker running; what it printed. */
const commandLine = (url: string, key: string) => (args: ReadonlyArray<string>) =>
  NodeProcess.run(NodeProcess.bothy, args, {
    DATABASE_URL: url,
    BOTHY_WEBHOOK_SECRET_KEY: key,
    BOTHY_WEBHOOK_ALLOW_HTTP_LOOPBACK: "true",
  })

/** Runs `args` and parses the `--json` answer, which is all of standard output. */
const jsonOf = (out: NodeProcess.Finished) => {
  assert.strictEqual(out.code, 0, out.stderr)
  return JSON.parse(out.stdout)
}

describe("bothy subscriptions", () => {
  it.live(
    "CliManagesEndpointCredentials: OAuth2 credentials, a client certificate and a CA are set from files, shown only as set, refused when bad, and removed",
    () =>
      Effect.gen(function* () {
        const { url } = yield* TestDatabase.cloneForProcesses("cli_endpoint_auth")
        const bothy = commandLine(url, WorkerProcess.rawKey())
        const pki = yield* EndpointServers.pki
        const dir = yield* Effect.acquireRelease(
          Effect.sync(() => mkdtempSync(join(tmpdir(), "bothy-cli-credentials-"))),
          (d) => Effect.sync(() => rmSync(d, { recursive: true, force: true })),
        )
        const file = (name: string, text: string) => {
          writeFileSync(join(dir, name), text)
          return join(dir, name)
        }
        const secret = "cli-client-secret-4b7e19d0c2"
        const keyLine = pki.clientA.key.split("\n")[1]!
        const credentials = [
          "--oauth-token-url",
          "http://127.0.0.1:9/token",
          "--oauth-client-id",
          "cli-client",
          "--oauth-client-secret-file",
          file("secret", `${secret}\n`),
          "--client-cert-file",
          file("client.crt", pki.clientA.cert),
          "--client-key-file",
          file("client.key", pki.clientA.key),
          "--ca-file",
          file("ca.crt", pki.serverCa),
        ]
        const create = ["subscriptions", "create", "--owner", "o", "--url", "https://127.0.0.1:9/o", "--scope", "s"]
        const out = yield* bothy([...create, ...credentials, "--json"])
        const created = jsonOf(out)
        assert.deepInclude(created.subscription, {
          auth: { type: "oauth2", tokenUrl: "http://127.0.0.1:9/token", clientId: "cli-client", scope: null },
          mtls: true,
          ca: true,
        })
        const id: string = created.subscription.id
        const shown = yield* bothy(["subscriptions", "show", id])
        assert.match(shown.stdout, /endpoint auth +oauth2, client cli-client at http:\/\/127\.0\.0\.1:9\/token/)
        assert.match(shown.stdout, /client certificate +set/)
        for (const text of [out.stdout, out.stderr, shown.stdout, shown.stderr]) {
          assert.notInclude(text, secret)
          assert.notInclude(text, keyLine)
        }

        const mismatch = yield* bothy([
          "subscriptions",
          "update",
          id,
          "--client-key-file",
          file("b.key", pki.clientB.key),
        ])
        assert.strictEqual(mismatch.code, 1)
        assert.match(mismatch.stderr, /at mtls\.(cert|key)/)
        assert.notInclude(mismatch.stderr, pki.clientB.key.split("\n")[1]!)

        const cleared = jsonOf(yield* bothy(["subscriptions", "update", id, "--clear-oauth", "--clear-mtls", "--json"]))
        assert.deepInclude(cleared, { auth: null, mtls: false, ca: true })
      }).pipe(Effect.scoped),
    120_000,
  )

  it.live(
    "CliManagesEventTypes: the CLI puts, lists, shows and deletes catalog types; subscriptions then take only known types, and a --filter",
    () =>
      Effect.gen(function* () {
        const { url } = yield* TestDatabase.cloneForProcesses("cli_types")
        const bothy = commandLine(url, WorkerProcess.rawKey())
        const schema = JSON.stringify({ type: "object", properties: { amount: { type: "number" } } })
        const put = jsonOf(
          yield* bothy([
            "event-types",
            "put",
            "order.created",
            "--schema",
            schema,
            "--example",
            '{"amount":1}',
            "--validated",
            "--json",
          ]),
        )
        assert.deepInclude(put, { name: "order.created", validated: true, deprecated: false, example: { amount: 1 } })
        const bad = yield* bothy(["event-types", "put", "order.bad", "--schema", schema, "--example", '{"amount":"x"}'])
        assert.strictEqual(bad.code, 1)
        assert.match(bad.stderr, /invalid event type at example/)
        assert.deepStrictEqual(
          jsonOf(yield* bothy(["event-types", "list", "--json"])).items.map((t: { name: string }) => t.name),
          [
            "bothy.delivery.dead",
            "bothy.subscription.degraded",
            "bothy.subscription.disabled",
            "bothy.subscription.recovered",
            "bothy.subscription.test",
            "order.created",
          ],
          "bothy's own operational event types are built in",
        )
        assert.match((yield* bothy(["event-types", "show", "order.created"])).stdout, /flags +validated/)

        const refused = yield* bothy(
          ["subscriptions", "create", "--owner", "o", "--url", "http://127.0.0.1:9/o", "--scope", "s"].concat([
            "--event-type",
            "invoice.*",
          ]),
        )
        assert.strictEqual(refused.code, 1)
        assert.match(refused.stderr, /eventTypes\[0\].*matches no type of the event-type catalog/)
        const created = jsonOf(
          yield* bothy(
            ["subscriptions", "create", "--owner", "o", "--url", "http://127.0.0.1:9/o", "--scope", "s"].concat([
              "--event-type",
              "order.*",
              "--filter",
              '{"path": "$.amount", "gte": 100}',
              "--json",
            ]),
          ),
        )
        assert.deepStrictEqual(created.subscription.filter, { path: "$.amount", gte: 100 })
        const cleared = jsonOf(
          yield* bothy(["subscriptions", "update", created.subscription.id, "--filter", "none", "--json"]),
        )
        assert.strictEqual(cleared.filter, null)

        assert.strictEqual((yield* bothy(["event-types", "delete", "order.created"])).code, 0)
        assert.deepStrictEqual(
          jsonOf(yield* bothy(["event-types", "list", "--json"])).items.map((t: { name: string }) => t.name),
          [
            "bothy.delivery.dead",
            "bothy.subscription.degraded",
            "bothy.subscription.disabled",
            "bothy.subscription.recovered",
            "bothy.subscription.test",
          ],
          "only the built-in types are left",
        )
      }),
    { timeout: 120_000 },
  )

  it.live(
    "CliManagesSubscriptions: the CLI creates, lists, shows (--json), updates, disables, enables, rotates and deletes subscriptions against the database, with no worker running",
    () =>
      Effect.gen(function* () {
        const { url } = yield* TestDatabase.cloneForProcesses("cli_admin")
        const bothy = commandLine(url, WorkerProcess.rawKey())
        // The test's own look at the database, beside what the command prints.
        const sql = yield* Effect.map(
          Layer.build(PgClient.layer({ url: Redacted.make(url), maxConnections: 2 })),
          Context.get(PgClient.PgClient),
        )

        // Create: the secret once, in the JSON answer or the person's lines.
        const created = jsonOf(
          yield* bothy([
            "subscriptions",
            "create",
            "--owner",
            "alice",
            "--url",
            "http://127.0.0.1:9/alice",
            "--scope",
            "space-a",
            "--scope",
            "space-b",
            "--event-type",
            "order.created",
            "--json",
          ]),
        )
        const id: string = created.subscription.id
        assert.match(created.secret, /^whsec_/)
        assert.deepStrictEqual(created.subscription.scope, ["space-a", "space-b"])
        assert.deepStrictEqual(created.subscription.eventTypes, ["order.created"])
        const [row] = yield* sql<{ owner: string }>`SELECT owner FROM webhook_subscriptions WHERE id = ${id}::uuid`
        assert.strictEqual(row?.owner, "alice")
        const forPeople = yield* bothy([
          "subscriptions",
          "create",
          "--owner",
          "bob",
          "--url",
          "http://127.0.0.1:9/bob",
          "--scope",
          "space-b",
        ])
        assert.strictEqual(forPeople.code, 0, forPeople.stderr)
        assert.match(forPeople.stdout, /^owner\s+bob$/m)
        assert.match(forPeople.stdout, /signing secret \(shown once.*\): whsec_/)
        const refused = yield* bothy(["subscriptions", "create", "--owner", "a", "--url", "ftp://x", "--scope", "s"])
        assert.strictEqual(refused.code, 1)
        assert.match(refused.stderr, /^bothy: webhook target .* refused/m)

        // List: a table for people, JSON by owner for scripts.
        const table = yield* bothy(["subscriptions", "list"])
        assert.strictEqual(table.code, 0, table.stderr)
        assert.match(table.stdout, /^\s+id\s+owner\s+state\s+url\s+scope$/m)
        assert.include(table.stdout, id)
        assert.match(table.stdout, /bob\s+active\s+http:\/\/127\.0\.0\.1:9\/bob/)
        const alices = jsonOf(yield* bothy(["subscriptions", "list", "--owner", "alice", "--json"]))
        assert.deepStrictEqual(
          alices.items.map((s: { id: string }) => s.id),
          [id],
        )

        // Show, update.
        const shown = jsonOf(yield* bothy(["subscriptions", "show", id, "--json"]))
        assert.deepInclude(shown, {
          id,
          owner: "alice",
          state: "active",
          rateLimit: null,
          startedSeq: "0",
          lastSequence: "0",
        })
        const updated = jsonOf(
          yield* bothy([
            "subscriptions",
            "update",
            id,
            "--url",
            "http://127.0.0.1:9/alice2",
            "--all-types",
            "--rate-limit",
            "2.5",
            "--header",
            "X-Api-Key=k1",
            "--json",
          ]),
        )
        assert.deepInclude(updated, { url: "http://127.0.0.1:9/alice2", rateLimit: 2.5, eventTypes: [] })
        assert.deepStrictEqual(updated.headers, { "x-api-key": "k1" })
        const badHeader = yield* bothy(["subscriptions", "update", id, "--header", "webhook-id=x"])
        assert.strictEqual(badHeader.code, 1)
        assert.match(badHeader.stderr, /^bothy: invalid webhook subscription at headers\["webhook-id"\]/m)

        // Disable, enable, rotate.
        const disabled = jsonOf(yield* bothy(["subscriptions", "disable", id, "--json"]))
        assert.deepInclude(disabled, { state: "disabled", disabledCause: "manual" })
        const enabled = jsonOf(yield* bothy(["subscriptions", "enable", id, "--json"]))
        assert.deepInclude(enabled, { enabled: true, deliveries: 0 })
        const rotated = jsonOf(yield* bothy(["subscriptions", "rotate", id, "--json"]))
        assert.match(rotated.secret, /^whsec_/)
        assert.notStrictEqual(rotated.secret, created.secret)
        const [sealed] = yield* sql<{ previous: string | null }>`
          SELECT previous_secret_sealed AS previous FROM webhook_subscriptions WHERE id = ${id}::uuid`
        assert.isNotNull(sealed?.previous)

        // A test event: appended for this subscription, named as the operator's.
        const tested = jsonOf(yield* bothy(["subscriptions", "test-event", id, "--json"]))
        assert.strictEqual(tested.type, "bothy.subscription.test")
        const [appended] = yield* sql<{ about: string; by: string }>`
          SELECT payload->>'subscription' AS about, payload->>'requestedBy' AS by FROM event_log WHERE seq = ${BigInt(tested.seq)}`
        assert.deepStrictEqual(appended, { about: id, by: "operator" })

        // Deliveries: none yet; a recovery is a job for the worker.
        const none = yield* bothy(["deliveries", "list", id])
        assert.strictEqual(none.code, 0, none.stderr)
        assert.match(none.stdout, /^\s+none$/m)
        const recovery = jsonOf(
          yield* bothy(["deliveries", "recover", id, "--since", "2026-01-01T00:00:00Z", "--json"]),
        )
        const [job] = yield* sql<{
          kind: string
          queue: string
        }>`SELECT kind, queue FROM jobs WHERE id = ${recovery.job}`
        assert.deepStrictEqual(job, { kind: "webhook.recover", queue: "webhooks" })

        // Delete: gone, and the next command says so in one line.
        const deleted = yield* bothy(["subscriptions", "delete", id])
        assert.strictEqual(deleted.code, 0, deleted.stderr)
        assert.match(deleted.stdout, new RegExp(`subscription ${id} deleted`))
        const missing = yield* bothy(["subscriptions", "show", id])
        assert.strictEqual(missing.code, 1)
        // Logs go to standard error too (standard output is the answer); the last line says why.
        assert.strictEqual(missing.stderr.trim().split("\n").at(-1), `bothy: no webhook subscription ${id}`)
      }),
    // Some twenty processes, each loading the whole command: a guard against a hang, not a speed target.
    { timeout: 300_000 },
  )

  it.live(
    "CliChecksSchemaNeverMigrates: against a database an older fleet runs (its latest migration missing), read-only and writing commands stop with one line naming the migration and saying to run bothy migrate, and change nothing; after bothy migrate they work; a misspelt key in --subscription JSON is named",
    () =>
      Effect.gen(function* () {
        const { url } = yield* TestDatabase.cloneForProcesses("cli_old")
        const bothy = commandLine(url, WorkerProcess.rawKey())
        const sql = yield* Effect.map(
          Layer.build(PgClient.layer({ url: Redacted.make(url), maxConnections: 2 })),
          Context.get(PgClient.PgClient),
        )
        // The database as the fleet before the latest migration left it.
        const latest = Object.keys(Migrations.migrations).at(-1)!
        const latestId = Number(latest.slice(0, 4))
        yield* sql`DELETE FROM bothy_migrations WHERE migration_id = ${latestId}`
        // What the latest migration (0027_event_log_in_place) added, undone.
        yield* sql`DROP SEQUENCE event_log_append_ids`
        yield* sql`ALTER TABLE event_seq DROP COLUMN unsequenced_from, DROP COLUMN unsequenced_after`
        yield* sql`DROP FUNCTION event_log_numbering_check(bigint, bigint)`
        const applied = sql<{ n: number }>`SELECT count(*)::int AS n FROM bothy_migrations`.pipe(
          Effect.map((rows) => rows[0]!.n),
        )
        const before = yield* applied

        const expected = `bothy: the database schema is older than this bothy: migration ${latest} is not applied; run \`bothy migrate\` first (this command never changes the schema)`
        for (const args of [
          ["subscriptions", "list"],
          ["subscriptions", "show", "0b9f6a2e-3c1d-4c5b-9a57-3f1f0f6c2d11", "--json"],
          ["deliveries", "list", "0b9f6a2e-3c1d-4c5b-9a57-3f1f0f6c2d11"],
          ["registrations", "list", "--principal", "p"],
          ["subscriptions", "create", "--owner", "o", "--url", "http://127.0.0.1:9/o", "--scope", "s"],
        ]) {
          const out = yield* bothy(args)
          assert.strictEqual(out.code, 1, `${args.join(" ")}: ${out.stdout}`)
          assert.strictEqual(out.stderr.trim().split("\n").at(-1), expected, args.join(" "))
          assert.strictEqual(out.stdout, "")
        }
        assert.strictEqual(yield* applied, before, "no command migrated")
        const [rows] = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM webhook_subscriptions`
        assert.strictEqual(rows?.n, 0, "the write did not happen")

        // bothy migrate is the one that upgrades; then the commands work.
        const migrated = yield* bothy(["migrate"])
        assert.strictEqual(migrated.code, 0, migrated.stderr)
        assert.strictEqual(yield* applied, before + 1)
        assert.deepStrictEqual(jsonOf(yield* bothy(["subscriptions", "list", "--json"])), { items: [], next: null })

        // The CLI's JSON input is read as strictly as the API's bodies.
        const typo = yield* bothy([
          "registrations",
          "create",
          "--principal",
          "p",
          "--subscription",
          JSON.stringify({
            endpoint: "https://push.example/x",
            keys: { p256dh: "a", auth: "b" },
            expirationtime: null,
          }),
        ])
        assert.strictEqual(typo.code, 1)
        assert.match(
          typo.stderr,
          /^bothy: push registration refused at subscription\.expirationtime \(BadShape\): unknown field subscription\.expirationtime/m,
        )
      }),
    { timeout: 180_000 },
  )
})
