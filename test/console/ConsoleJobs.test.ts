/**
 * The jobs page as an operator uses it: a job that really failed (a kind that fails, run by the job
 * worker, discarded after its one attempt) is retried, and a scheduled one is cancelled, by
 * clicking the page's own buttons and accepting their confirmation; the page then shows the jobs in
 * their new states.
 */
import { assert, layer } from "@effect/vitest"
import { Effect, Layer, Schema } from "effect"
import { SqlClient } from "effect/sql"
import * as JobKind from "../../src/jobs/JobKind.ts"
import { Jobs } from "../../src/jobs/Jobs.ts"
import * as JobWorker from "../../src/jobs/JobWorker.ts"
import * as TestWebhooks from "../support/TestWebhooks.ts"
import * as ConsoleBrowser from "./ConsoleBrowser.ts"

const failing = JobKind.make({
  kind: "console.fails",
  args: Schema.Struct({}),
  run: () => Effect.fail("the receiver of this job is gone"),
})

const stateOf = (id: bigint) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<{ state: string }>`SELECT state::text AS state FROM jobs WHERE id = ${id}`,
      (rows) => rows[0]!.state,
    ),
  )

layer(TestWebhooks.layer(), { excludeTestServices: true })("the console's jobs page", (it) => {
  it.effect(
    "ConsoleJobsRetryAndCancel: a failed job is retried and a scheduled one cancelled from the page's buttons, and the page shows their new states",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const jobs = yield* Jobs
        yield* jobs.insert([{ kind: failing.kind, queue: "console", args: {}, maxAttempts: 1 }])
        yield* jobs.insert([{ kind: "console.later", args: {}, scheduledAt: new Date(Date.now() + 3_600_000) }])
        const [failed] = yield* sql<{ id: bigint }>`SELECT id FROM jobs WHERE kind = ${failing.kind}`
        const [later] = yield* sql<{ id: bigint }>`SELECT id FROM jobs WHERE kind = 'console.later'`
        // The worker runs the failing job once; it is discarded, and the worker stops with the scope.
        yield* Effect.gen(function* () {
          const signals = yield* TestWebhooks.signals
          yield* Layer.build(
            JobWorker.layer({
              kinds: [failing],
              queues: { console: { concurrency: 1 } },
              pollInterval: "50 millis",
              onFinalized: signals.onFinalized,
            }),
          )
          yield* signals.until(Effect.map(stateOf(failed!.id), (s) => s === "discarded"))
        }).pipe(Effect.scoped)

        const { base, page, dialogs } = yield* ConsoleBrowser.operator("/console/jobs")
        // biome-ignore lint/performance/useDomNodeTextContent: the visible text is what the test asserts on
        const text = (selector: string) => Effect.promise(() => page.locator(selector).innerText())
        const failedRow = `#jobs tr[data-job="${failed!.id}"]`
        assert.strictEqual(yield* text(`${failedRow} [data-cell="state"]`), "discarded")
        assert.include(yield* text(failedRow), "the receiver of this job is gone", "its last error")

        // Retry: the click asks first, then the page reloads with the job runnable again.
        yield* Effect.promise(() =>
          Promise.all([
            page.waitForEvent("load"),
            page.getByRole("button", { name: `Retry job ${failed!.id}` }).click(),
          ]),
        )
        assert.strictEqual(yield* stateOf(failed!.id), "available")
        assert.include(yield* text(".flash"), `Retry job ${failed!.id}: done`)
        assert.include(yield* text(`#job-groups tr[data-kind="${failing.kind}"][data-state="available"]`), "1")

        // Cancel the scheduled one, listed when scheduled jobs are asked for.
        yield* Effect.promise(() => page.goto(`${base}/console/jobs?state=scheduled`))
        assert.strictEqual(yield* text(`#jobs tr[data-job="${later!.id}"] [data-cell="state"]`), "scheduled")
        assert.strictEqual(
          yield* Effect.promise(() => page.locator(`#jobs tr[data-job="${later!.id}"] button`).count()),
          2,
          "a scheduled job can be retried (now) or cancelled",
        )
        yield* Effect.promise(() =>
          Promise.all([
            page.waitForEvent("load"),
            page.getByRole("button", { name: `Cancel job ${later!.id}` }).click(),
          ]),
        )
        assert.strictEqual(yield* stateOf(later!.id), "cancelled")
        assert.include(yield* text(`#job-groups tr[data-kind="console.later"][data-state="cancelled"]`), "1")
        yield* Effect.promise(() => page.goto(`${base}/console/jobs?state=cancelled`))
        assert.strictEqual(yield* text(`#jobs tr[data-job="${later!.id}"] [data-cell="state"]`), "cancelled")
        assert.strictEqual(
          yield* Effect.promise(() => page.locator(`#jobs tr[data-job="${later!.id}"] button`).count()),
          1,
          "a cancelled job can only be retried",
        )
        yield* ConsoleBrowser.screenshot(page, "console-jobs.png")
        assert.deepStrictEqual(
          dialogs.map((d) => d.message),
          [
            `Run job ${failed!.id} (${failing.kind}) again now?`,
            `Cancel job ${later!.id} (console.later)? It will not run.`,
          ],
        )
      }).pipe(Effect.scoped),
    120_000,
  )
})
