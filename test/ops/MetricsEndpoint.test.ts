import { readdirSync, readFileSync } from "node:fs"
import { assert, layer } from "@effect/vitest"
import { Effect, Queue } from "effect"
import { SqlClient } from "effect/sql"
import * as WebhookReceiver from "../../testkit/WebhookReceiver.ts"
import * as Eventually from "../support/Eventually.ts"
import * as PrometheusText from "../support/PrometheusText.ts"
import * as Promtool from "../support/Promtool.ts"
import * as PushWorker from "../support/PushWorker.ts"
import { LocalPushService, RunningWorker } from "../support/PushWorker.ts"
import * as TestConsumer from "../support/TestConsumer.ts"
import { member } from "../support/TestPushWorker.ts"
import * as TestWebhooks from "../support/TestWebhooks.ts"

const Live = PushWorker.layer()

const scrape = Effect.flatMap(RunningWorker, (w) => w.scrape)
const exposition = Effect.map(scrape, (s) => PrometheusText.parse(s.body))

const consumerNames = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql<{ name: string }>`SELECT name FROM event_consumer_cursors ORDER BY name`.pipe(
    Effect.map((rows) => rows.map((r) => r.name)),
  ),
)

interface Dashboard {
  readonly panels: ReadonlyArray<{
    readonly type: string
    readonly title: string
    readonly targets?: ReadonlyArray<{ readonly expr: string }>
  }>
}

const dashboard = JSON.parse(
  readFileSync(new URL("../../deploy/grafana/bothy.json", import.meta.url), "utf8"),
) as Dashboard

/** Every metric name the dashboard's queries use, with the panel that uses it. */
const dashboardMetrics = () => {
  const names = new Map<string, string>()
  for (const panel of dashboard.panels) {
    for (const target of panel.targets ?? []) {
      for (const [name] of target.expr.matchAll(/\bbothy_[a-z0-9_]+/g)) names.set(name, panel.title)
    }
  }
  return names
}

/** Label names a bothy metric may carry: each takes its values from a set fixed by the code. */
const boundedLabels = new Set(["consumer", "outcome", "kind", "queue", "cause", "state", "provider", "change", "le"])

layer(Live, { excludeTestServices: true })("the metrics endpoint of a running worker", (it) => {
  it.effect(
    "MetricsEndpointExportsConsumerGauges: every consumer's lag and pending age are there from the start (0), and follow the log",
    () =>
      Effect.gen(function* () {
        const first = yield* scrape
        assert.strictEqual(first.status, 200)
        assert.match(first.contentType, /^text\/plain; version=0\.0\.4/)
        const start = PrometheusText.parse(first.body)
        const names = yield* consumerNames
        assert.isNotEmpty(names)
        for (const consumer of names) {
          assert.strictEqual(PrometheusText.value(start, "bothy_event_consumer_lag", { consumer }), 0, consumer)
          assert.strictEqual(
            PrometheusText.value(start, "bothy_event_consumer_pending_age_seconds", { consumer }),
            0,
            consumer,
          )
        }
        for (const name of new Set(start.samples.map((s) => PrometheusText.family(start, s)))) {
          assert.isNotEmpty(start.help.get(name) ?? "", `${name} has help text`)
        }

        // Held cursor: the consumer cannot move, so the sampled gauges show what is waiting.
        const held = yield* TestConsumer.holdCursor("webhooks")
        for (const n of [1, 2, 3]) yield* TestWebhooks.append("gauges", { n })
        const behind = yield* Eventually.eventually(
          exposition,
          (e) => PrometheusText.value(e, "bothy_event_consumer_lag", { consumer: "webhooks" }) === 3,
          { what: "lag 3 for webhooks while its cursor is held", within: "40 seconds", every: "200 millis" },
        )
        assert.isAbove(
          PrometheusText.value(behind, "bothy_event_consumer_pending_age_seconds", { consumer: "webhooks" }) ?? 0,
          0,
        )
        yield* held.release
        const caughtUp = yield* Eventually.eventually(
          exposition,
          (e) => PrometheusText.value(e, "bothy_event_consumer_lag", { consumer: "webhooks" }) === 0,
          { what: "lag back to 0 once the cursor is free", within: "40 seconds", every: "200 millis" },
        )
        assert.strictEqual(
          PrometheusText.value(caughtUp, "bothy_event_consumer_pending_age_seconds", { consumer: "webhooks" }),
          0,
        )
        assert.isAtLeast(
          PrometheusText.value(caughtUp, "bothy_event_consumer_events_total", { consumer: "webhooks" }) ?? 0,
          3,
        )
      }),
  )

  it.effect(
    "MetricsHaveBoundedLabels: with many subscriptions delivered and failing, no label names one, and every label is from a fixed set",
    () =>
      Effect.gen(function* () {
        const receiver = yield* WebhookReceiver.start(({ path }) => ({ status: path.startsWith("/fail") ? 500 : 200 }))
        const subscriptions = []
        for (let i = 0; i < 12; i++) {
          const path = i % 3 === 0 ? `/fail/${i}` : `/ok/${i}`
          subscriptions.push(yield* TestWebhooks.subscribe(`owner-${i}`, receiver.url(path), [`space-${i}`]))
        }
        for (let i = 0; i < 12; i++) yield* TestWebhooks.append(`space-${i}`, { i })
        for (let i = 0; i < 12; i++) yield* Queue.take(receiver.received)
        const e = yield* Eventually.eventually(
          exposition,
          (x) =>
            (PrometheusText.value(x, "bothy_webhooks_attempts_total", { outcome: "delivered" }) ?? 0) >= 8 &&
            (PrometheusText.value(x, "bothy_webhooks_attempts_total", { outcome: "failed" }) ?? 0) >= 4,
          { what: "8 delivered and 4 failed attempts counted", within: "40 seconds", every: "200 millis" },
        )
        const named = new Set(subscriptions.flatMap((s, i) => [s.id, `owner-${i}`, `space-${i}`]))
        for (const sample of e.samples) {
          for (const [label, value] of Object.entries(sample.labels)) {
            assert.isTrue(boundedLabels.has(label), `${sample.name} carries label ${label}`)
            assert.isFalse(named.has(value), `${sample.name}{${label}="${value}"} names a subscription`)
            assert.notInclude(value, receiver.url(""), `${sample.name}{${label}} holds a URL`)
          }
        }
        assert.isAbove(PrometheusText.value(e, "bothy_webhooks_failing_head_age_seconds_count") ?? 0, 0)
        assert.isAbove(PrometheusText.value(e, "bothy_webhooks_delivery_latency_seconds_count") ?? 0, 0)
      }),
  )

  it.effect(
    "DashboardQueriesNameExportedMetrics: every metric deploy/grafana/bothy.json queries is one the worker's endpoint exports",
    () =>
      Effect.gen(function* () {
        const wanted = dashboardMetrics()
        const panels = dashboard.panels.filter((p) => p.type !== "row")
        assert.isAtLeast(panels.length, 10)
        for (const panel of panels) assert.isNotEmpty(panel.targets ?? [], `${panel.title} has queries`)
        for (const topic of [
          "bothy_event_consumer_lag",
          "bothy_event_consumer_pending_age_seconds",
          "bothy_jobs_insert_to_start_seconds_bucket",
          "bothy_webhooks_delivery_latency_seconds_bucket",
          "bothy_webhooks_attempts_total",
          "bothy_jobs_rows",
          "bothy_webhooks_subscriptions",
          "bothy_push_deliveries_total",
          "bothy_push_handoff_latency_seconds_bucket",
          "bothy_push_registrations_removed_total",
          "bothy_push_events_lost_total",
          "bothy_push_registrations",
        ]) {
          assert.isTrue(wanted.has(topic), `the dashboard shows ${topic}`)
        }
        // Push traffic for its panels: one browser answered, one gone (410: its registration removed).
        const service = yield* LocalPushService
        const [kept, gone] = yield* member(service, "dash-push", "dash-ann", 2)
        service.script(gone!.browser.id, [{ status: 410 }])
        yield* TestWebhooks.append("dash-push", { n: 1 })
        const answered = new Map((yield* service.take(2)).map((m) => [m.subscriptionId, m.status]))
        assert.deepStrictEqual(
          [answered.get(kept!.browser.id), answered.get(gone!.browser.id)],
          [201, 410],
          "both browsers reached, one answered gone",
        )
        // The previous test's deliveries made every counter and histogram move; the database gauges follow within a sample.
        const exported = (e: PrometheusText.Exposition) => new Set(e.samples.map((s) => s.name))
        const e = yield* Eventually.eventually(exposition, (x) => [...wanted.keys()].every((n) => exported(x).has(n)), {
          what: "every metric of the dashboard in a scrape",
          within: "40 seconds",
          every: "500 millis",
        }).pipe(Effect.catchTag("NotEventually", () => exposition))
        const names = exported(e)
        for (const [name, panel] of wanted) assert.isTrue(names.has(name), `${name} (panel "${panel}") is exported`)
      }),
  )

  it.effect("MetricsAreDocumented: every metric family of a scrape has its row in a table of docs/", () =>
    Effect.gen(function* () {
      const docs = new URL("../../docs/", import.meta.url)
      const pages = readdirSync(docs)
        .filter((name) => name.endsWith(".md"))
        .map((name) => readFileSync(new URL(name, docs), "utf8"))
        .join("\n")
      const e = yield* exposition
      for (const name of new Set(e.samples.map((s) => PrometheusText.family(e, s)))) {
        assert.match(pages, new RegExp(`^\\| \`${name}\` +\\|`, "m"), `${name} is documented`)
      }
    }),
  )

  it.effect("MetricsPassPromtoolCheck: `promtool check metrics` on a scrape of the worker finds nothing", () =>
    Effect.gen(function* () {
      const { body } = yield* scrape
      assert.include(body, "bothy_jobs_start_to_finish_seconds_bucket", "the scrape has job histograms")
      const checked = yield* Promtool.run(["check", "metrics"], { stdin: body })
      assert.strictEqual(checked.output, "", checked.output)
      assert.strictEqual(checked.code, 0, checked.output)
    }),
  )
})
