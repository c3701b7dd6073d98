import { readdirSync } from "node:fs"
import { assert, layer } from "@effect/vitest"
import { Effect } from "effect"
import { SqlClient } from "effect/sql"
import * as Migrations from "../src/Migrations.ts"
import * as TestDatabase from "./support/TestDatabase.ts"

layer(TestDatabase.layer(), { excludeTestServices: true })("Migrations", (it) => {
  it.effect("every file in migrations/ is registered, with ids that only grow", () =>
    Effect.sync(() => {
      const files = readdirSync(new URL("../migrations", import.meta.url))
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

  it.effect("applying twice is a no-op", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      // The template the test database was cloned from is already migrated.
      assert.deepStrictEqual(yield* Migrations.run, [])
      const [row] = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM bothy_migrations`
      assert.strictEqual(row!.n, Object.keys(Migrations.migrations).length)
    }),
  )
})
