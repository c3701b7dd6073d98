/**
 * The server version check (`PostgresVersion`), on the project's real server: part of the versions
 * matrix, so each major's project proves it really runs on that major before its suites count.
 */
import { assert, layer } from "@effect/vitest"
import { Effect } from "effect"
import { inject } from "vitest"
import * as PostgresVersion from "../../src/platform/PostgresVersion.ts"
import * as TestDatabase from "../support/TestDatabase.ts"

layer(TestDatabase.layer(), { excludeTestServices: true })("PostgresVersion", (it) => {
  it.effect("PostgresVersionsMatrix: the project's server is the major it is named for, and supported", () =>
    Effect.gen(function* () {
      const version = yield* PostgresVersion.check()
      assert.strictEqual(version.major, inject("pgMajor"))
      assert.include(PostgresVersion.supportedMajors, version.major)
      assert.isTrue(version.text.startsWith(`${version.major}.`), version.text)
    }),
  )

  it.effect("PostgresVersionRefused: a server older than the minimum is refused with one line naming both", () =>
    Effect.gen(function* () {
      const actual = yield* PostgresVersion.read
      const error = yield* Effect.flip(PostgresVersion.check(actual.major + 1))
      assert(error._tag === "PostgresVersionUnsupported", error.message)
      assert.strictEqual(error.found, actual.text)
      assert.strictEqual(
        error.message,
        `PostgreSQL ${actual.text} is older than bothy supports: it needs PostgreSQL ${actual.major + 1} or newer (supported: 15 to 18)`,
      )
      assert.notInclude(error.message, "\n")
    }),
  )
})
