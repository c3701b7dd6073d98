/**
 * The architecture rules of docs/architecture.md (`.dependency-cruiser.cjs`) hold over src/, and they
 * bite: the same check over a copy of src/ with one forbidden import reports exactly that import.
 */
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { assert, describe, it } from "vitest"
import * as ArchitectureCheck from "../support/ArchitectureCheck.ts"

const root = join(import.meta.dirname, "..", "..")

describe("ArchitectureRules", () => {
  it("ArchitectureRulesHold: no import in src/ breaks a rule of docs/architecture.md", async () => {
    const violations = await ArchitectureCheck.check()
    assert.deepStrictEqual(violations, [], `\n${ArchitectureCheck.describe(violations)}`)
  })

  it("ArchitectureRulesHold: a copy of src/ where the log imports the job runtime fails on that import", async () => {
    const copy = mkdtempSync(join(tmpdir(), "bothy-forbidden-"))
    try {
      for (const folder of ["src", "migrations"]) cpSync(join(root, folder), join(copy, folder), { recursive: true })
      const eventLog = join(copy, "src", "log", "EventLog.ts")
      writeFileSync(eventLog, `import "../jobs/Jobs.ts"\n${readFileSync(eventLog, "utf8")}`)
      const violations = await ArchitectureCheck.check(copy)
      console.log(ArchitectureCheck.describe(violations))
      assert.deepStrictEqual(violations, [
        { rule: "log-knows-no-consumer", from: "src/log/EventLog.ts", to: "src/jobs/Jobs.ts" },
      ])
    } finally {
      rmSync(copy, { recursive: true, force: true })
    }
  })
})
