/**
 * docs/configuration.md's settings table is the one generated from the code that declares the
 * settings (`test/support/ConfigTable.ts`): keys and variables from their names, defaults asked of
 * each setting's reader, meanings from the generator's checked map. A setting added, removed or
 * given another default in `src/` fails here until `npx node test/support/writeConfigTable.ts`
 * rewrites the table.
 */
import { readFileSync } from "node:fs"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as ConfigTable from "../support/ConfigTable.ts"

const update = "Update it with: npx node test/support/writeConfigTable.ts"

describe("ConfigTable", () => {
  it("ConfigTableIsCurrent: every setting src/ declares has a row of the generator, and every row a setting", () => {
    const declared = ConfigTable.declaredKeys()
    const described = new Set(ConfigTable.meanings.map(([key]) => key))
    assert.deepStrictEqual(
      [...declared].filter((key) => !described.has(key)).sort(),
      [],
      "settings in src/ with no meaning in test/support/ConfigTable.ts",
    )
    assert.deepStrictEqual(
      [...described].filter((key) => !declared.has(key)).sort(),
      [],
      "meanings in test/support/ConfigTable.ts for settings src/ no longer declares",
    )
  })

  it.effect(
    "ConfigTableIsCurrent: docs/configuration.md's settings table is the one generated from the settings' definitions",
    () =>
      Effect.gen(function* () {
        const expected = yield* ConfigTable.generate
        const current = ConfigTable.currentBlock(readFileSync(ConfigTable.file, "utf8"))
        assert.isDefined(current, `docs/configuration.md lost its ${ConfigTable.begin} ... ${ConfigTable.end} markers`)
        if (current !== expected) {
          assert.fail(`docs/configuration.md's settings table is stale. ${update}\n\nExpected:\n\n${expected}\n`)
        }
      }),
    60_000,
  )

  it.effect("ConfigTableIsCurrent: the defaults are the code's, read back from its refusal of an empty variable", () =>
    Effect.gen(function* () {
      const defaults = yield* Effect.forEach(
        ["consumer.batch_size", "webhook.history_retention", "push.ttl", "admin.address", "DATABASE_URL"],
        (key) => Effect.map(ConfigTable.defaultOf(key), (d) => [key, d._tag === "Some" ? d.value : null] as const),
      )
      assert.deepStrictEqual(Object.fromEntries(defaults), {
        "consumer.batch_size": "500",
        "webhook.history_retention": null,
        "push.ttl": "1d",
        "admin.address": "127.0.0.1:9465",
        DATABASE_URL: null,
      })
    }),
  )
})
