/**
 * What a transaction pooler cannot carry stays where it is routed (docs/operations.md, "Behind a
 * pooler"): the code and the migrations hold no session-level advisory lock, no session
 * `set_config`, no temporary table and no pipelining of statements from many fibers, and the few
 * session `SET`s, reserved connections and connections of their own are in the files that route them
 * (`DatabaseSessions`). A new one elsewhere would work on a direct server and break behind PgBouncer.
 */
import { readdirSync, readFileSync } from "node:fs"
import { join, relative } from "node:path"
import { assert, describe, it } from "@effect/vitest"

const root = join(import.meta.dirname, "..", "..")

const files = (dir: string) =>
  readdirSync(join(root, dir), { withFileTypes: true, recursive: true })
    .filter((e) => e.isFile() && e.name.endsWith(".ts"))
    .map((e) => relative(root, join(e.parentPath, e.name)))

/** A construct, and the files allowed to hold it (none: nowhere). */
const rules: ReadonlyArray<{
  readonly what: string
  readonly pattern: RegExp
  readonly allowed: ReadonlyArray<string>
}> = [
  { what: "a session-level advisory lock", pattern: /pg_(try_)?advisory_lock(_shared)?\s*\(/, allowed: [] },
  { what: "a session set_config", pattern: /set_config\([^)]*,\s*false\s*\)/, allowed: [] },
  { what: "a temporary table", pattern: /\bCREATE\s+(TEMP|TEMPORARY)\b/i, allowed: [] },
  { what: "statements pipelined from many fibers", pattern: /\bmultiplex\s*:\s*true/, allowed: [] },
  { what: "a session SET", pattern: /[`"]\s*SET (?!LOCAL\b)([a-z_]+|\$\{\w+\}) =/, allowed: ["src/log/Retention.ts"] },
  { what: "a reserved connection", pattern: /\.reserve\b/, allowed: ["src/log/Retention.ts"] },
  {
    what: "a connection of its own",
    pattern: /PgConnection\.make\(/,
    allowed: ["src/platform/NotificationStream.ts", "src/platform/DatabaseSessions.ts"],
  },
]

describe("SQL behind a transaction pooler", () => {
  it("SessionStateOnlyWhereRouted: nothing session-scoped outside the files that route it over a session of its own", () => {
    const found: Array<string> = []
    for (const file of [...files("src"), ...files("migrations")]) {
      const text = readFileSync(join(root, file), "utf8")
      for (const rule of rules) {
        if (rule.pattern.test(text) && !rule.allowed.includes(file)) found.push(`${file}: ${rule.what}`)
      }
    }
    assert.deepStrictEqual(found, [])
    // The rules do match what they are for (so a typo cannot make them pass by matching nothing).
    const retention = readFileSync(join(root, "src/log/Retention.ts"), "utf8")
    assert.match(retention, rules.find((r) => r.what === "a session SET")!.pattern)
    assert.match(retention, rules.find((r) => r.what === "a reserved connection")!.pattern)
  })
})
