/**
 * The `/metrics` endpoint every bothy process serves: Prometheus text of the process's Effect
 * metrics, on `metrics.address` (loopback by default; `off` serves nothing).
 *
 * Effect's own exporter (`effect/observability/PrometheusMetrics`) renders the registry; what it
 * leaves to us is Prometheus's naming conventions, kept here in one place so that no module has to
 * spell wire names: dots become underscores (the exporter does that), and a counter's name ends in
 * `_total` (added here when the Effect name lacks it, so a counter defined elsewhere, as push's
 * are, follows the rule too). Durations are named `..._seconds` and recorded in seconds where they
 * are defined. `promtool check metrics` on a scrape is part of CI (`.ci/promtool`).
 */
import { Effect, Metric, Schema } from "effect"
import { HttpRouter, HttpServerResponse } from "effect/http"
import { PrometheusMetrics } from "effect/observability"
import * as BothyConfig from "../platform/BothyConfig.ts"
import * as ListenAddress from "../platform/ListenAddress.ts"

/** Where the endpoint listens; `None`: it is off. */
export type MetricsAddress = ListenAddress.ListenAddress

export const defaultAddress = "127.0.0.1:9464"

/** `host:port`, `[v6]:port`, or `off`. Port 0 takes any free port (the start line names it). */
export const parseAddress = (raw: string) => ListenAddress.parse(raw, defaultAddress)

/** `BOTHY_METRICS_ADDRESS` (`metrics.address`). */
export const loadAddress = BothyConfig.setting("metrics.address", defaultAddress, parseAddress)

export class MetricsAddressUnavailable extends Schema.TaggedError<MetricsAddressUnavailable>()(
  "MetricsAddressUnavailable",
  { address: Schema.String, reason: Schema.String },
) {
  override get message() {
    return `the metrics endpoint cannot listen on ${this.address} (BOTHY_METRICS_ADDRESS, metrics.address): ${this.reason}; give another address, or off`
  }
}

/** The Prometheus name of an Effect metric: counters end in `_total`. */
export const wireName = (metric: Pick<Metric.Metric.Snapshot, "id" | "type">) =>
  (metric.type === "Counter" || metric.type === "Frequency") && !metric.id.endsWith("_total")
    ? `${metric.id}_total`
    : metric.id

/** The process's metrics as Prometheus text, with the names `wireName` gives. */
export const render = Effect.gen(function* () {
  const context = yield* Effect.context<never>()
  const wire = new Map(Metric.snapshotUnsafe(context).map((m) => [m.id, wireName(m)]))
  return PrometheusMetrics.formatUnsafe(context, { metricNameMapper: (id) => wire.get(id) ?? id })
})

const routes = HttpRouter.add(
  "GET",
  "/metrics",
  Effect.map(render, (body) =>
    HttpServerResponse.text(body, { contentType: "text/plain; version=0.0.4; charset=utf-8" }),
  ),
)

/** Serves `/metrics` on `address` for the layer's lifetime; nothing when it is off. */
export const layer = (address: MetricsAddress) =>
  ListenAddress.serve(address, routes, {
    announce: (url) => Effect.logInfo(`metrics served on ${url}/metrics`),
    unavailable: (address, reason) => new MetricsAddressUnavailable({ address, reason }),
  })
