/**
 * The tools beside the product, chaos/ and bench/, import nothing from test/: they run on their own
 * (`npm run chaos`, `npm run bench`), and test/ is free to change for the tests' sake. Every
 * module they name, statically, dynamically or as a `new URL(..., import.meta.url)` (a worker
 * thread or a child process), resolves outside test/.
 */
import { readdirSync, readFileSync, statSync } from "node:fs"
import { dirname, join, relative, resolve } from "node:path"
import { assert, describe, it } from "vitest"

const root = join(import.meta.dirname, "..", "..")
const testFolder = join(root, "test")

const specifiers = [
  /\bfrom\s*["']([^"']+)["']/g,
  /\bimport\s*["']([^"']+)["']/g,
  /\bimport\s*\(\s*["']([^"']+)["']/g,
  /\bnew URL\(\s*["']([^"']+)["']\s*,\s*import\.meta\.url/g,
]

/** The relative modules `source` (the text of `file`) names that lie in test/. */
const intoTest = (file: string, source: string) =>
  specifiers
    .flatMap((pattern) => [...source.matchAll(pattern)].map((m) => m[1]!))
    .filter((specifier) => specifier.startsWith("."))
    .map((specifier) => resolve(dirname(file), specifier))
    .filter((target) => !relative(testFolder, target).startsWith(".."))
    .map((target) => relative(root, target))

const sources = (folder: string): ReadonlyArray<string> =>
  readdirSync(folder).flatMap((name) => {
    const path = join(folder, name)
    if (statSync(path).isDirectory()) return sources(path)
    return name.endsWith(".ts") ? [path] : []
  })

describe("ToolsStandAlone", () => {
  it("ToolsStandAlone: no module of chaos/ or bench/ imports from test/", () => {
    const files = [...sources(join(root, "chaos")), ...sources(join(root, "bench"))]
    assert.isAbove(files.length, 40, "both tools' modules were read")
    const found = files.flatMap((file) =>
      intoTest(file, readFileSync(file, "utf8")).map((target) => `${relative(root, file)} -> ${target}`),
    )
    assert.deepStrictEqual(found, [])
  })

  it("ToolsStandAlone: the check sees every form of import into test/", () => {
    const file = join(root, "chaos", "Example.ts")
    const source = [
      `import { freePort } from "../test/support/TestServer.ts"`,
      `import "../test/support/Side.ts"`,
      `const m = await import("../test/support/Lazy.ts")`,
      `new Worker(new URL("../test/support/thread.ts", import.meta.url))`,
      `import { Effect } from "effect"`,
      `import * as Tenants from "./Tenants.ts"`,
      `import { x } from "../src/testing/X.ts"`,
    ].join("\n")
    assert.deepStrictEqual(intoTest(file, source), [
      "test/support/TestServer.ts",
      "test/support/Side.ts",
      "test/support/Lazy.ts",
      "test/support/thread.ts",
    ])
  })
})
