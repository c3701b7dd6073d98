/**
 * bothy in a schema of its own (`BOTHY_DATABASE_SCHEMA`), in a database whose `public` already
 * holds the host app's tables, some named like bothy's (`jobs`, `event_log`, `bothy_migrations`,
 * `webhook_subscriptions`), with rows. `bothy migrate` and `bothy worker` run as a role that owns
 * the database and is not superuser; the host's layers append and subscribe on a pool of their own.
 *
 * What must hold: every object bothy makes (tables, retention's partitions, sequences, functions,
 * the migrations' bookkeeping; bothy has no triggers) is in bothy's schema, webhooks go out, and the host's
 * tables are exactly as they were. Through PgBouncer in transaction mode the startup packet cannot
 * carry the path: the role carries it, and without that the start stops with the one line that
 * names the statement, which is then run as given.
 */

import { PgClient } from "@effect/sql-pg"
import { assert, layer } from "@effect/vitest"
import { Effect, Layer, Queue, Redacted, type Scope } from "effect"
import { SqlClient } from "effect/sql"
import * as SecretBox from "../../src/crypto/SecretBox.ts"
import * as DatabaseSchema from "../../src/platform/DatabaseSchema.ts"
import * as Migrations from "../../src/platform/Migrations.ts"
import * as Pooler from "../../testkit/Pooler.ts"
import * as WebhookReceiver from "../../testkit/WebhookReceiver.ts"
import * as EmbeddedWorker from "../support/EmbeddedWorker.ts"
import { eventually } from "../support/Eventually.ts"
import * as NodeProcess from "../support/NodeProcess.ts"
import * as OwnedDatabase from "../support/OwnedDatabase.ts"
import * as TestDatabase from "../support/TestDatabase.ts"
import * as TestWebhooks from "../support/TestWebhooks.ts"
import * as WorkerProcess from "../support/WorkerProcess.ts"

const schema = "bothy_own"
const env = { BOTHY_DATABASE_SCHEMA: schema }

/** The host's own tables in `public`, named like bothy's, with rows. */
const hostTables = `
  CREATE TABLE public.jobs (id serial PRIMARY KEY, kind text NOT NULL, args jsonb NOT NULL);
  INSERT INTO public.jobs (kind, args) VALUES ('invoice', '{"n": 1}'), ('email', '{"n": 2}');
  CREATE TABLE public.event_log (seq bigint PRIMARY KEY, payload jsonb NOT NULL);
  INSERT INTO public.event_log VALUES (1, '{"host": true}'), (2, '{"host": true}');
  CREATE TABLE public.bothy_migrations (migration_id integer PRIMARY KEY, name text NOT NULL);
  INSERT INTO public.bothy_migrations VALUES (1, 'host_own_first'), (999, 'host_own_last');
  CREATE TABLE public.webhook_subscriptions (id text PRIMARY KEY, url text NOT NULL);
  INSERT INTO public.webhook_subscriptions VALUES ('w1', 'https://host.example/hook');`

/** Every row of the host's tables, as text, and every object in `public`. */
const hostState = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const rows = yield* sql<{ state: string }>`
    SELECT (SELECT json_agg(t ORDER BY id)::text FROM public.jobs AS t) || (SELECT json_agg(t ORDER BY seq)::text FROM public.event_log AS t)
      || (SELECT json_agg(t ORDER BY migration_id)::text FROM public.bothy_migrations AS t)
      || (SELECT json_agg(t ORDER BY id)::text FROM public.webhook_subscriptions AS t) AS state`
  const objects = yield* sql<{ name: string }>`
    SELECT c.relname AS name FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
    WHERE n.nspname = 'public'
    UNION ALL SELECT p.proname FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace WHERE n.nspname = 'public'
    UNION ALL SELECT t.tgname FROM pg_trigger AS t JOIN pg_class AS c ON c.oid = t.tgrelid
      JOIN pg_namespace AS n ON n.oid = c.relnamespace WHERE n.nspname = 'public'
    ORDER BY 1`
  return { rows: rows[0]!.state, objects: objects.map((o) => o.name) }
})

/** What bothy made in its schema: the day partitions, and how many migrations its bookkeeping holds. */
const bothyState = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const days = yield* sql<{ name: string }>`
    SELECT c.relname AS name FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
    WHERE n.nspname = ${schema} AND c.relname ~ '^event_log_[0-9]{8}$' ORDER BY 1`
  const [applied] = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM ${sql(schema)}.bothy_migrations`
  const [kinds] = yield* sql<{ functions: number; sequences: number }>`
    SELECT (SELECT count(*)::int FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace WHERE n.nspname = ${schema}) AS functions,
           (SELECT count(*)::int FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
              WHERE n.nspname = ${schema} AND c.relkind = 'S') AS sequences`
  return { days: days.map((d) => d.name), applied: applied!.n, ...kinds! }
})

const onPool = <A, E>(url: string, effect: Effect.Effect<A, E, SqlClient.SqlClient>) =>
  effect.pipe(Effect.provide(PgClient.layer({ url: Redacted.make(url), maxConnections: 1 })))

/**
 * Drops the last day partition retention keeps ahead, starts the worker, and waits for retention
 * to make it again: in bothy's schema, since the worker's connections look there first.
 */
const workerRemakesLastDay = (start: Effect.Effect<unknown, unknown, Scope.Scope>, directUrl: string) =>
  Effect.gen(function* () {
    const before = yield* onPool(directUrl, bothyState)
    const last = before.days.at(-1)!
    yield* onPool(
      directUrl,
      Effect.flatMap(SqlClient.SqlClient, (sql) => sql.unsafe(`DROP TABLE ${schema}.${last}`)),
    )
    yield* start
    yield* eventually(onPool(directUrl, bothyState), (s) => s.days.includes(last), {
      what: `retention makes ${last} again in ${schema}`,
      within: "60 seconds",
      every: "200 millis",
    })
    return last
  })

/** Subscribes a receiver, appends five events with the host's layers, and takes the five webhooks. */
const deliverFive = (owned: OwnedDatabase.OwnedDatabase, key: string, url: string, pooled = false) =>
  Effect.gen(function* () {
    const services = yield* Layer.build(
      TestWebhooks.layerAt(owned.name, {
        secretKey: yield* SecretBox.parseKey(Redacted.make(key)),
        url,
        // Through a pooler the role carries the path: a startup parameter would be refused there.
        pool: pooled ? { prepare: false } : { startupParameters: DatabaseSchema.startupParameters(schema)! },
      }),
    )
    return yield* Effect.gen(function* () {
      const receiver = yield* WebhookReceiver.start(() => ({ status: 200 }))
      yield* TestWebhooks.subscribe("owner", receiver.url("/hook"), ["space"])
      for (let i = 1; i <= 5; i++) yield* TestWebhooks.append("space", { i })
      const got: Array<number> = []
      while (got.length < 5) got.push(TestWebhooks.envelope(yield* Queue.take(receiver.received)).data.i)
      return got
    }).pipe(Effect.provide(services))
  })

const withHostTables = Effect.gen(function* () {
  const owned = yield* OwnedDatabase.make
  yield* onPool(
    owned.url,
    Effect.flatMap(SqlClient.SqlClient, (sql) =>
      Effect.forEach(
        hostTables.split(";").filter((st) => st.trim() !== ""),
        (statement) => sql.unsafe(statement),
        { discard: true },
      ),
    ),
  )
  return { owned, host: yield* onPool(owned.url, hostState) }
})

/** The role's processes on `url` (direct, or through a pooler with `directUrl` beside it). */
const asRole = (owned: OwnedDatabase.OwnedDatabase, url: string, directUrl: string) =>
  Effect.provideService(TestDatabase.TestDatabase, TestDatabase.TestDatabase.of({ name: owned.name, url, directUrl }))

const bookkeeping = Object.keys(Migrations.migrations).length

/**
 * On a migrated database: the worker on `url` remakes a day partition, the host's layers on `url`
 * get five webhooks out in order, everything bothy made is in its schema, and the host's objects
 * and rows are as they were (`host`).
 */
const runsInSchema = (
  owned: OwnedDatabase.OwnedDatabase,
  host: Effect.Success<typeof hostState>,
  url: string,
  pooled: boolean,
) =>
  Effect.gen(function* () {
    const key = WorkerProcess.rawKey()
    yield* workerRemakesLastDay(asRole(owned, url, owned.url)(WorkerProcess.start(key, env)), owned.url)
    assert.deepStrictEqual(yield* deliverFive(owned, key, url, pooled), [1, 2, 3, 4, 5])
    const made = yield* onPool(owned.url, bothyState)
    assert.strictEqual(made.applied, bookkeeping, "every migration is recorded in the schema's bookkeeping")
    assert.isAbove(made.days.length, 14, "the day partitions ahead are in the schema")
    assert.isAbove(made.functions, 0, "functions in the schema")
    assert.isAbove(made.sequences, 0, "sequences in the schema")
    assert.deepStrictEqual(
      yield* onPool(owned.url, hostState),
      host,
      "public holds the host's objects and rows, unchanged",
    )
  })

layer(Layer.empty, { excludeTestServices: true })("a schema of its own", (it) => {
  it.effect(
    "OwnSchema: beside host tables named like bothy's in public, bothy migrates into and runs in its own schema: webhooks delivered, retention's partitions, functions, sequences and bookkeeping in the schema, the host's tables unchanged",
    () =>
      Effect.gen(function* () {
        const { owned, host } = yield* withHostTables
        const migrated = yield* NodeProcess.run(NodeProcess.bothy, ["migrate"], { DATABASE_URL: owned.url, ...env })
        assert.strictEqual(migrated.code, 0, migrated.stderr)
        // The log is JSON, so the line's quotes come escaped.
        assert.include(migrated.stdout, `bothy's objects live in schema \\"${schema}\\" (BOTHY_DATABASE_SCHEMA)`)
        yield* runsInSchema(owned, host, owned.url, false)
      }).pipe(Effect.scoped),
    180_000,
  )

  it.effect(
    "OwnSchemaThroughTransactionPooler: through PgBouncer in transaction mode the start is refused in one line naming ALTER ROLE ... SET search_path; once it is run, migrate, worker and the host's layers run in the schema and the host's tables are unchanged",
    () =>
      Effect.gen(function* () {
        const { owned, host } = yield* withHostTables
        const target = Pooler.targetOf(owned.url)
        const migrate = (pooled: string) =>
          NodeProcess.run(NodeProcess.bothy, ["migrate"], {
            DATABASE_URL: pooled,
            DATABASE_DIRECT_URL: owned.url,
            ...env,
          })
        // Before the role carries the path: refused, before any table of bothy's is created.
        const refused = yield* Effect.scoped(
          Effect.flatMap(Pooler.start(target, "transaction"), (pooler) => migrate(pooler.urlOf(owned.name))),
        )
        assert.strictEqual(refused.code, 1, refused.stderr)
        const lines = EmbeddedWorker.lines(refused.stderr)
        assert.strictEqual(lines.length, 1, refused.stderr)
        const line = lines[0]
        assert.include(
          line!,
          `bothy's schema "${schema}" (BOTHY_DATABASE_SCHEMA) is not first on the search_path of DATABASE_URL's connections`,
        )
        const statement = /run (ALTER ROLE .*? SET search_path = "bothy_own")/.exec(line!)?.[1]
        assert.strictEqual(
          statement,
          `ALTER ROLE "${owned.role}" IN DATABASE "${owned.name}" SET search_path = "${schema}"`,
        )
        yield* onPool(
          owned.url,
          Effect.flatMap(SqlClient.SqlClient, (sql) => sql.unsafe(statement!)),
        )
        // A pooler whose server connections start after it (PgBouncer's RECONNECT does the same).
        const pooler = yield* Pooler.start(target, "transaction")
        const pooled = pooler.urlOf(owned.name)
        const migrated = yield* migrate(pooled)
        assert.strictEqual(migrated.code, 0, migrated.stderr)
        assert.include(migrated.stdout, "transaction pooler")
        // The host's layers through the pooler too: no startup parameter (the role carries the path).
        yield* runsInSchema(owned, host, pooled, true)
      }).pipe(Effect.scoped),
    180_000,
  )
})
