/**
 * Runs dependency-cruiser with the rules of `.dependency-cruiser.cjs` over a tree's src/, testkit/,
 * bench/ and chaos/ (and what they import: the migrations, test/), and gives back the violations
 * with their .ts paths. A tree without one of those folders is checked without it.
 *
 * dependency-cruiser parses TypeScript only through the `typescript` package's JS API, which
 * TypeScript 7 no longer has; so the tree is copied to a scratch folder with its types stripped by
 * Node (`stripTypeScriptTypes`), its files and relative imports renamed to .js. Type-only imports
 * become plain imports first, so that a type import still counts as a dependency.
 */
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs"
import { createRequire, stripTypeScriptTypes } from "node:module"
import { tmpdir } from "node:os"
import { join, relative } from "node:path"
import { cruise, type IConfiguration, type ICruiseResult } from "dependency-cruiser"

const root = join(import.meta.dirname, "..", "..")

export interface Violation {
  readonly rule: string
  readonly from: string
  readonly to: string
  /** For a cycle: the modules around it, starting after `from`. */
  readonly cycle?: ReadonlyArray<string>
}

const asTs = (path: string) => path.replace(/\.js$/, ".ts")

// `import type {...}`, `export type {...} from` and `{ type A, B }` keep their imports once typeless.
const keepTypeImports = (source: string) =>
  source
    .replace(/\bimport\s+type\s+(?=[{*\w])/g, "import ")
    .replace(/\bexport\s+type\s+(?=[{*])/g, "export ")
    .replace(
      /\b(import|export)\s*\{([^}]*)\}\s*from/g,
      (_, keyword: string, names: string) => `${keyword} {${names.replace(/(^|,)(\s*)type\s+(?=\w)/g, "$1$2")}} from`,
    )

const asJs = (source: string) =>
  stripTypeScriptTypes(keepTypeImports(source), { mode: "strip" }).replace(
    /(["'])(\.{1,2}\/[^"']*)\.ts\1/g,
    "$1$2.js$1",
  )

const copyAsJs = (from: string, to: string) => {
  for (const name of readdirSync(from)) {
    const source = join(from, name)
    if (statSync(source).isDirectory()) copyAsJs(source, join(to, name))
    else if (name.endsWith(".ts")) {
      mkdirSync(to, { recursive: true })
      writeFileSync(join(to, name.replace(/\.ts$/, ".js")), asJs(readFileSync(source, "utf8")))
    }
  }
}

/** The rules, as `.dependency-cruiser.cjs` at the project's root gives them. */
export const configuration = (): IConfiguration => createRequire(import.meta.url)(join(root, ".dependency-cruiser.cjs"))

/** The folders whose imports are judged. */
const cruised = ["src", "testkit", "bench", "chaos"]
/** Copied too, so that an import into them resolves and is judged by the rule about it. */
const imported = ["migrations", "test"]

/** The violations of the rules in `tree` (a folder holding src/ and migrations/; the project by default). */
export const check = async (tree: string = root): Promise<ReadonlyArray<Violation>> => {
  const scratch = mkdtempSync(join(tmpdir(), "bothy-architecture-"))
  try {
    const present = (folder: string) => existsSync(join(tree, folder))
    for (const folder of [...cruised, ...imported].filter(present)) copyAsJs(join(tree, folder), join(scratch, folder))
    const config = configuration()
    const result = await cruise(cruised.filter(present), {
      ...config.options,
      baseDir: scratch,
      validate: true,
      ruleSet: { forbidden: config.forbidden ?? [] },
    })
    const output: ICruiseResult = typeof result.output === "string" ? JSON.parse(result.output) : result.output
    if (output.summary.totalCruised === 0)
      throw new Error(`dependency-cruiser read no module in ${relative(root, scratch)}`)
    return output.summary.violations.map((v) => ({
      rule: v.rule.name,
      from: asTs(v.from),
      to: asTs(v.to),
      ...(v.cycle === undefined ? {} : { cycle: v.cycle.map((m) => asTs(m.name)) }),
    }))
  } finally {
    rmSync(scratch, { recursive: true, force: true })
  }
}

/** One line per violation, for a failing test's message. */
export const describe = (violations: ReadonlyArray<Violation>) =>
  violations
    .map((v) => `${v.rule}: ${v.from} -> ${v.to}${v.cycle === undefined ? "" : ` (cycle: ${v.cycle.join(" -> ")})`}`)
    .join("\n")
