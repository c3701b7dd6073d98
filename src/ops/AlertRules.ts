/**
 * bothy's Prometheus alert rules, rendered from the settings so that the lag alert's threshold is
 * `consumer.pending_alert_after` and cannot drift from it: `bothy alerts render` writes them from
 * the running configuration, and `deploy/prometheus/alerts.yml` is the rendering of the defaults
 * (a test keeps the two equal; `deploy/prometheus/alerts.test.yml` holds promtool's unit tests).
 *
 * Several workers export the same database gauges, so every expression aggregates (`max by`,
 * `sum by`) over instances. Each alert carries a `runbook_url` into docs/operations.md.
 */
import { Duration } from "effect"

export interface AlertOptions {
  /** `consumer.pending_alert_after`. */
  readonly pendingAlertAfter: Duration.Duration
  /** Where docs/operations.md is published; each alert links to its section there. */
  readonly runbookBase?: string
}

/** Relative to the repository by default; give the address of your published copy. */
export const defaultRunbookBase = "docs/operations.md"

/**
 * How long a job may run before it counts as stuck: well past the longest kind's timeout (5
 * minutes, `JobExecutor`) and the lease a dead worker's jobs wait out before they are rescued.
 */
export const stuckRunningAfter = Duration.minutes(15)

interface Rule {
  readonly alert: string
  readonly expr: string
  readonly for: string
  readonly severity: "page" | "ticket"
  readonly summary: string
  readonly description: string
}

const seconds = (d: Duration.Duration) => String(Math.round(Duration.toSeconds(d)))

export const rules = (options: AlertOptions): ReadonlyArray<Rule> => [
  {
    alert: "BothyEventConsumerLag",
    expr: `max by (consumer) (bothy_event_consumer_pending_age_seconds) > ${seconds(options.pendingAlertAfter)}`,
    for: "5m",
    severity: "page",
    summary: "bothy consumer {{ $labels.consumer }} is behind the event log",
    description: `The oldest event consumer {{ $labels.consumer }} has not processed is {{ $value | humanizeDuration }} old, more than consumer.pending_alert_after (${Duration.format(options.pendingAlertAfter)}). Events that leave the log (sync.event_retention) before it catches up are lost.`,
  },
  {
    alert: "BothyMetricsAbsent",
    expr: "absent(bothy_event_consumer_pending_age_seconds)",
    for: "10m",
    severity: "page",
    summary: "no bothy worker exports its metrics",
    description:
      "No scraped target has exported bothy_event_consumer_pending_age_seconds for 10 minutes: every worker is down or unreachable, and the lag alert cannot fire.",
  },
  {
    alert: "BothyEventsLost",
    expr: "sum by (consumer) (increase(bothy_event_consumer_lost_events_total[15m])) > 0",
    for: "0m",
    severity: "page",
    summary: "bothy consumer {{ $labels.consumer }} lost events",
    description:
      "Events had left the log before consumer {{ $labels.consumer }} read them, in the last 15 minutes. Webhook subscriptions that missed them are disabled with cause gap.",
  },
  {
    alert: "BothyWebhookSubscriptionsDisabled",
    expr: "sum by (cause) (increase(bothy_webhooks_subscriptions_disabled_total[15m])) > 0",
    for: "0m",
    severity: "ticket",
    summary: "bothy disabled webhook subscriptions (cause {{ $labels.cause }})",
    description:
      "Webhook subscriptions were disabled in the last 15 minutes with cause {{ $labels.cause }}: gap (events lost), gone (the endpoint answered 410), failing (it failed for days), or manual.",
  },
  {
    alert: "BothyPushConfigurationErrors",
    expr: 'sum(increase(bothy_push_deliveries_total{outcome="config_error"}[15m])) > 0',
    for: "0m",
    severity: "ticket",
    summary: "bothy push deliveries fail on configuration",
    description:
      "Push deliveries failed with outcome config_error in the last 15 minutes: the VAPID keys or push settings are wrong, so no push message goes out.",
  },
  {
    alert: "BothyNativePushConfigurationErrors",
    expr: 'sum by (provider) (increase(bothy_push_native_deliveries_total{outcome="config_error"}[15m])) > 0',
    for: "0m",
    severity: "page",
    summary: "bothy {{ $labels.provider }} push fails on configuration",
    description:
      "{{ $labels.provider }} messages failed with outcome config_error in the last 15 minutes: the provider refuses the key or service account, the worker has no credentials for it, or (APNs) every device says BadDeviceToken because the worker's environment is not the app's. The devices are kept; no message reaches them until it is fixed.",
  },
  {
    alert: "BothyJobsStuckRunning",
    expr: `max by (kind) (bothy_jobs_oldest_running_seconds) > ${seconds(stuckRunningAfter)}`,
    for: "5m",
    severity: "ticket",
    summary: "bothy jobs of kind {{ $labels.kind }} are stuck running",
    description: `A job of kind {{ $labels.kind }} has been running for {{ $value | humanizeDuration }}, more than ${Duration.format(stuckRunningAfter)}: longer than any job's timeout lets it.`,
  },
]

/** The section of docs/operations.md for an alert (GitHub's heading anchors: lower case). */
export const runbookUrl = (base: string, alert: string) => `${base}#${alert.toLowerCase()}`

/** Double quotes (JSON's, which YAML reads the same), or single ones around a text with double quotes, as Biome formats YAML. */
const quoted = (text: string) => (text.includes('"') && !/['\n\\]/.test(text) ? `'${text}'` : JSON.stringify(text))

/** The rule file, as YAML. */
export const render = (options: AlertOptions): string => {
  const base = options.runbookBase ?? defaultRunbookBase
  const lines = [
    "# bothy alert rules. Rendered by `bothy alerts render` from the configuration; do not edit by hand.",
    `# consumer.pending_alert_after = ${Duration.format(options.pendingAlertAfter)}`,
    "groups:",
    "  - name: bothy",
    "    rules:",
  ]
  for (const rule of rules(options)) {
    lines.push(
      `      - alert: ${rule.alert}`,
      `        expr: ${quoted(rule.expr)}`,
      `        for: ${rule.for}`,
      "        labels:",
      `          severity: ${rule.severity}`,
      "        annotations:",
      `          summary: ${quoted(rule.summary)}`,
      `          description: ${quoted(rule.description)}`,
      `          runbook_url: ${quoted(runbookUrl(base, rule.alert))}`,
    )
  }
  return `${lines.join("\n")}\n`
}
