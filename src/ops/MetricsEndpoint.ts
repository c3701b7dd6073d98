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
import { createServer } from "node:http"
import { NodeHttpServer } from "@effect/platform-node"
import { Cause, Effect, Layer, Metric, Option, Result, Schema } from "effect"
import { HttpRouter, HttpServer, HttpServerResponse } from "effect/http"
import { PrometheusMetrics } from "effect/observability"
import * as BothyConfig from "../platform/BothyConfig.ts"

/** Where the endpoint listens; `None`: it is off. */
export type MetricsAddress = Option.Option<{ readonly host: string; readonly port: number }>

export const defaultAddress = "127.0.0.1:9464"

/** `host:port`, `[v6]:port`, or `off`. Port 0 takes any free port (the start line names it). */
export const parseAddress = (raw: string): Result.Result<MetricsAddress, string> => {
  const text = raw.trim()
  if (text.toLowerCase() === "off") return Result.succeed(Option.none())
  const match = /^(?:\[([0-9a-fA-F:.]+)\]|([^:[\]\s]+)):(\d{1,5})$/.exec(text)
  const port = Number(match?.[3])
  if (match === null || !Number.isInteger(port) || port > 65535) {
    return Result.fail(`expected host:port (e.g. ${defaultAddress}, [::1]:9464, 0.0.0.0:9464) or off`)
  }
  return Result.succeed(Option.some({ host: match[1] ?? match[2]!, port }))
}

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

/** The socket's own words (`listen EADDRINUSE ...`), under the server's wrapper. */
const reasonOf = (error: unknown): string =>
  error instanceof Error ? (error.cause instanceof Error ? error.cause.message : error.message) : String(error)

const announce = HttpServer.addressFormattedWith((url) => Effect.logInfo(`metrics served on ${url}/metrics`))

/** Serves `/metrics` on `address` for the layer's lifetime; nothing when it is off. */
export const layer = (address: MetricsAddress) =>
  Option.match(address, {
    onNone: () => Layer.empty,
    onSome: ({ host, port }) =>
      Layer.merge(
        HttpRouter.serve(routes, { disableLogger: true, disableListenLog: true }),
        Layer.effectDiscard(announce),
      ).pipe(
        Layer.provide(NodeHttpServer.layer(createServer, { host, port })),
        Layer.catchCause((cause) =>
          Layer.effectDiscard(
            Effect.fail(
              new MetricsAddressUnavailable({
                address: host.includes(":") ? `[${host}]:${port}` : `${host}:${port}`,
                reason: reasonOf(Cause.squash(cause)),
              }),
            ),
          ),
        ),
      ),
  })
