/**
 * Prints the plain closing line CI reads, `N passed, N failed[, N skipped]`, after vitest's own
 * summary. Errors outside any test (an unhandled rejection, a failed setup) count as failures.
 * When the run covers more than one PostgreSQL major (`PostgresMatrix`), the line before it gives
 * each major's counts: `PostgreSQL 18: N passed, N failed; 17: ...`.
 */
import type { Reporter, TestModule } from "vitest/node"

interface Counts {
  passed: number
  failed: number
  skipped: number
}

const line = (c: Counts) => `${c.passed} passed, ${c.failed} failed${c.skipped > 0 ? `, ${c.skipped} skipped` : ""}`

const countModule = (module: TestModule, into: Counts) => {
  let failedHere = 0
  for (const test of module.children.allTests()) {
    const state = test.result().state
    if (state === "passed") into.passed++
    else if (state === "failed") failedHere++
    else into.skipped++
  }
  // A module can fail with no failing test (a hook, an import, an empty suite): count it once.
  into.failed += failedHere > 0 || module.state() !== "failed" ? failedHere : 1
}

export default class SummaryReporter implements Reporter {
  onTestRunEnd(modules: ReadonlyArray<TestModule>, unhandledErrors: ReadonlyArray<unknown>) {
    const total: Counts = { passed: 0, failed: unhandledErrors.length, skipped: 0 }
    const byProject = new Map<string, Counts>()
    for (const module of modules) {
      const name = module.project.name
      const counts = byProject.get(name) ?? { passed: 0, failed: 0, skipped: 0 }
      byProject.set(name, counts)
      countModule(module, counts)
      countModule(module, total)
    }
    const majors = [...byProject.entries()]
      .filter(([name]) => /^PostgreSQL \d+$/.test(name))
      .sort(([a], [b]) => Number(b.slice(11)) - Number(a.slice(11)))
    const perMajor =
      majors.length > 1
        ? `\nPostgreSQL ${majors.map(([name, counts]) => `${name.slice(11)}: ${line(counts)}`).join("; ")}`
        : ""
    process.stdout.write(`${perMajor}\n${line(total)}\n`)
  }
}
