/**
 * Prints the plain closing line CI reads, `N passed, N failed[, N skipped]`, after vitest's own
 * summary. Errors outside any test (an unhandled rejection, a failed setup) count as failures.
 */
import type { Reporter, TestModule } from "vitest/node"

export default class SummaryReporter implements Reporter {
  onTestRunEnd(modules: ReadonlyArray<TestModule>, unhandledErrors: ReadonlyArray<unknown>) {
    let passed = 0
    let failed = unhandledErrors.length
    let skipped = 0
    for (const module of modules) {
      let failedHere = 0
      for (const test of module.children.allTests()) {
        const state = test.result().state
        if (state === "passed") passed++
        else if (state === "failed") failedHere++
        else skipped++
      }
      // A module can fail with no failing test (a hook, an import, an empty suite): count it once.
      failed += failedHere > 0 || module.state() !== "failed" ? failedHere : 1
    }
    process.stdout.write(`\n${passed} passed, ${failed} failed${skipped > 0 ? `, ${skipped} skipped` : ""}\n`)
  }
}
