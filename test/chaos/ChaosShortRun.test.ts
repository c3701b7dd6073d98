/**
 * The short chaos run inside `npm test`: the harness of `npm run chaos` with its own
 * PostgreSQL, three real `bothy worker` processes, producers and the seeded faults (SIGKILL,
 * SIGTERM, terminated backends, a PostgreSQL restart, revoked grants, a disabled subscription,
 * receiver faults, 410s, the retention gap), then the drain and the verdict from the database and
 * the receivers. A fixed seed fixes the faults: the schedule printed is the same every time.
 */
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Effect, References } from "effect"
import * as ChaosRun from "../../chaos/ChaosRun.ts"
import * as Report from "../../chaos/Report.ts"

const options = { seed: 18, events: 1200, kills: 2, ratePerSecond: 40 }

describe("chaos, short", () => {
  it.live(
    "ChaosShortRunExactlyOnce: under SIGKILL and SIGTERM of workers, terminated backends, a PostgreSQL restart, revoked grants, a disabled subscription, receiver faults and a retention gap, every allowed delivery arrives (once by its webhook-id), in seq order, numbered without a gap, nothing denied arrives, the gap is reported, the cursors reach the head and no job is left running; the same seed prints the same schedule",
    () =>
      Effect.gen(function* () {
        const planned = ChaosRun.plan(options)
        assert.strictEqual(ChaosRun.plan(options).text, planned.text, "the same seed plans the same faults")
        assert.notStrictEqual(ChaosRun.plan({ ...options, seed: options.seed + 1 }).text, planned.text)
        const printed: Array<string> = []
        // The workers' logs, removed afterwards: a test leaves nothing behind.
        const logDir = yield* Effect.acquireRelease(
          Effect.sync(() => mkdtempSync(join(tmpdir(), "bothy-chaos-test-logs-"))),
          (dir) => Effect.sync(() => rmSync(dir, { recursive: true, force: true })),
        )
        const result = yield* ChaosRun.run({
          ...options,
          producers: 4,
          drainTimeout: "60 seconds",
          sampleEvery: "10 seconds",
          log: (line) => printed.push(line),
          logDir,
        }).pipe(Effect.provideService(References.MinimumLogLevel, "Error"))
        assert.strictEqual(printed[0], planned.text, "the run prints the planned schedule")
        assert.deepStrictEqual(
          result.history.injected.map((f) => f.kind),
          planned.faults.map((f) => f.kind),
          "every planned fault was injected, in order",
        )
        for (const kind of ["sigkill", "sigterm", "terminate-backends", "pg-restart", "revoke", "retention-gap"])
          assert.include(
            result.history.injected.map((f) => f.kind),
            kind,
          )
        assert.isAbove(result.verdict.figures.events!, 1000)
        assert.isAbove(result.verdict.figures.webhook_accepted!, 0)
        assert.isAbove(result.verdict.figures.push_accepted!, 0)
        // The verdict can fail: each planted fault is counted.
        assert.includeMembers(
          result.controls.map((c) => c.name),
          ["an accepted webhook dropped", "two first arrivals swapped", "an accepted push dropped"],
        )
        for (const c of result.controls) assert.isAbove(c.value, 0, `${c.name}: ${c.counts}`)
        const failed = Report.targets(result).filter((t) => !t.held)
        assert.deepStrictEqual(failed, [], Report.table(result))
      }).pipe(Effect.scoped),
    170_000,
  )
})
