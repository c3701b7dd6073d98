import { readdirSync } from "node:fs"
import { assert, layer } from "@effect/vitest"
import { Effect } from "effect"
import { SqlClient } from "effect/sql"
import * as Migrations from "../../src/platform/Migrations.ts"
import * as TestDatabase from "../support/TestDatabase.ts"

layer(TestDatabase.layer(), { excludeTestServices: true })("Migrations", (it) => {
  it.effect("every file in migrations/ is registered, with ids that only grow", () =>
    Effect.sync(() => {
      const files = readdirSync(new URL("../../migrations", import.meta.url))
        .filter((f) => /^\d{4}_.*\.ts$/.test(f))
        .map((f) => f.replace(/\.ts$/, ""))
        .sort()
      assert.deepStrictEqual(Object.keys(Migrations.migrations).sort(), files)
      // Strictly growing; a number may be missing while the branch that holds it is unmerged.
      const ids = files.map((f) => Number(f.slice(0, 4)))
      assert.isTrue(
        ids.every((id, i) => id > (ids[i - 1] ?? 0)),
        ids.join(", "),
      )
    }),
  )
})

/** Every table, column and index of the public schema, with types: what a migration could change. */
const schema = Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => sql<{ item: string }>`
    SELECT table_name || '.' || column_name || ' ' || data_type || ' ' || coalesce(column_default, '') AS item
    FROM information_schema.columns WHERE table_schema = 'public'
    UNION ALL SELECT indexdef FROM pg_indexes WHERE schemaname = 'public'
    ORDER BY 1`,
).pipe(Effect.map((rows) => rows.map((r) => r.item)))

layer(TestDatabase.layerEmpty(), { excludeTestServices: true })("Migrations on an empty database", (it) => {
  it.effect(
    "applying twice is a no-op: the first run applies every migration, the second none and changes nothing",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        assert.deepStrictEqual(yield* schema, [], "the database starts with no schema at all")
        const first = yield* Migrations.run
        assert.deepStrictEqual(
          first.map(([id, name]) => `${String(id).padStart(4, "0")}_${name}`),
          Object.keys(Migrations.migrations),
          "the first run applies every migration, in order",
        )
        const after = yield* schema
        assert.isAbove(after.length, 0)
        assert.deepStrictEqual(yield* Migrations.run, [], "the second run applies nothing")
        assert.deepStrictEqual(yield* schema, after, "and changes no table, column or index")
        const [row] = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM bothy_migrations`
        assert.strictEqual(row!.n, Object.keys(Migrations.migrations).length)
      }),
  )
})
