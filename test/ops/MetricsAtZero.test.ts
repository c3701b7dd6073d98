/**
 * What the operator's rules and dashboard query is there from a worker's first scrape: every
 * `bothy_...` metric that a file of deploy/ (Prometheus alert rules and their tests, the Grafana
 * dashboard), docs/ or README.md names, at 0 when nothing has happened yet. A metric that appears
 * only once something happens leaves `increase(...)` and `rate(...)` empty until then, and an alert on it
 * cannot tell "none" from "not exported".
 */
import { readdirSync, readFileSync } from "node:fs"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { assert, layer } from "@effect/vitest"
import { Effect } from "effect"
import * as ConsoleSession from "../../src/console/ConsoleSession.ts"
import { migrationsTable } from "../../src/platform/Migrations.ts"
import * as PrometheusText from "../support/PrometheusText.ts"
import * as PushWorker from "../support/PushWorker.ts"
import { RunningWorker } from "../support/PushWorker.ts"

const Live = PushWorker.layer()

const root = fileURLToPath(new URL("../../", import.meta.url))

const filesUnder = (dir: string): ReadonlyArray<string> =>
  readdirSync(join(root, dir), { withFileTypes: true, recursive: true })
    .filter((entry) => entry.isFile())
    .map((entry) => join(entry.parentPath, entry.name))

/** `bothy_...` names the docs use that are not metrics: the migrations table, the console's cookie. */
const notMetrics: ReadonlySet<string> = new Set([migrationsTable, ConsoleSession.cookieName])

/**
 * Every `bothy_...` name in deploy/, docs/ and README.md, with the first file that names it. The
 * generated SQL (docs/schema.sql, docs/sql/) names tables, not metrics.
 */
const namedMetrics = () => {
  const names = new Map<string, string>()
  const files = [...filesUnder("deploy"), ...filesUnder("docs"), join(root, "README.md")]
  for (const file of files.filter((f) => !f.endsWith(".sql"))) {
    for (const [name] of readFileSync(file, "utf8").matchAll(/\bbothy_[a-z0-9_]+/g)) {
      if (!names.has(name) && !notMetrics.has(name)) names.set(name, file.slice(root.length))
    }
  }
  return names
}

/** A histogram's series names are its family's name plus one of these. */
const histogramSuffix = /_(bucket|count|sum)$/

layer(Live, { excludeTestServices: true })("the first scrape of a worker", (it) => {
  it.effect(
    "MetricsExportedAtZero: every bothy_ metric that deploy/, docs/ or README.md names is in a fresh worker's first scrape, counters at 0 with their label sets",
    () =>
      Effect.gen(function* () {
        const worker = yield* RunningWorker
        const first = yield* worker.scrape
        assert.strictEqual(first.status, 200)
        const e = PrometheusText.parse(first.body)
        const families = new Set(e.samples.map((s) => PrometheusText.family(e, s)))

        const named = namedMetrics()
        assert.isAtLeast(named.size, 30, "deploy/ and docs/ name the metrics")
        const missing = [...named]
          .filter(([name]) => !families.has(name) && !families.has(name.replace(histogramSuffix, "")))
          .map(([name, file]) => `${name} (${file})`)
        assert.deepStrictEqual(
          missing,
          [],
          `named in deploy/, docs/ or README.md, absent from the first scrape: ${missing.join(", ")}`,
        )

        // The two the operator found absent, at 0: nothing was suppressed or removed yet.
        assert.strictEqual(PrometheusText.value(e, "bothy_jobs_insert_suppressed_total"), 0)
        for (const cause of ["gone", "stale"]) {
          assert.strictEqual(PrometheusText.value(e, "bothy_push_registrations_removed_total", { cause }), 0, cause)
        }
        // A counter by a bounded label is there for each value of it.
        for (const outcome of ["delivered", "gone", "config_error", "expired", "retried", "throttled", "blocked"]) {
          assert.strictEqual(PrometheusText.value(e, "bothy_push_deliveries_total", { outcome }), 0, outcome)
        }
      }),
  )
})
