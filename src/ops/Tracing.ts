/**
 * Span export over OTLP (HTTP, JSON) when the standard OpenTelemetry variables ask for it:
 * `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (used as given), or `OTEL_EXPORTER_OTLP_ENDPOINT` (with
 * `/v1/traces` appended); `OTEL_EXPORTER_OTLP_(TRACES_)HEADERS` (`key=value,...`, values
 * URL-encoded), `OTEL_SERVICE_NAME` (default `bothy`), `OTEL_RESOURCE_ATTRIBUTES`,
 * `OTEL_BSP_SCHEDULE_DELAY` (milliseconds between exports), `OTEL_TRACES_EXPORTER` (`none` turns
 * it off) and `OTEL_SDK_DISABLED`. Without an endpoint nothing is exported and spans cost what
 * Effect's own tracer costs.
 *
 * Effect's `OtlpTracer.layerFromConfig` reads the same variables but exports only when
 * `OTEL_TRACES_EXPORTER` is set as well; the OpenTelemetry specification makes `otlp` that
 * variable's default, so an endpoint alone is enough here. The headers often carry an API key:
 * they stay `Redacted` and no message quotes them.
 */
import { Duration, Effect, Layer, Option, Redacted } from "effect"
import { FetchHttpClient } from "effect/http"
import { OtlpSerialization, OtlpTracer } from "effect/observability"
import { InvalidConfig, variable } from "../platform/BothyConfig.ts"

export interface TracingSettings {
  readonly url: string
  readonly serviceName: string
  readonly headers: Redacted.Redacted<Record<string, string>>
  readonly exportInterval: Duration.Duration | undefined
}

const read = (name: string) => variable(name, { unset: "for the default" })

const text = (name: string) => Effect.map(read(name), Option.map(Redacted.value))

const url = (name: string, raw: string, append: string) => {
  const parsed = URL.parse(raw.trim())
  if (parsed === null || !/^https?:$/.test(parsed.protocol)) {
    return Effect.fail(new InvalidConfig({ keys: [name], detail: `${name}: expected an http or https URL` }))
  }
  if (append !== "") parsed.pathname = `${parsed.pathname.replace(/\/$/, "")}/${append}`
  return Effect.succeed(parsed.toString())
}

const headers = (name: string, raw: string) =>
  Effect.try({
    try: () =>
      Object.fromEntries(
        raw
          .split(",")
          .filter((pair) => pair.trim() !== "")
          .map((pair) => {
            const at = pair.indexOf("=")
            if (at <= 0) throw new RangeError("a pair without =")
            return [pair.slice(0, at).trim(), decodeURIComponent(pair.slice(at + 1).trim())] as const
          }),
      ),
    // Not the value: it may hold an API key.
    catch: () => new InvalidConfig({ keys: [name], detail: `${name}: expected key=value pairs separated by commas` }),
  })

/** The export settings from the environment; `None`: spans are not exported. */
export const load: Effect.Effect<Option.Option<TracingSettings>, InvalidConfig> = Effect.gen(function* () {
  const disabled = yield* text("OTEL_SDK_DISABLED")
  const exporter = yield* text("OTEL_TRACES_EXPORTER")
  if (Option.getOrUndefined(disabled)?.trim().toLowerCase() === "true") return Option.none()
  if (
    Option.isSome(exporter) &&
    !exporter.value
      .toLowerCase()
      .split(",")
      .map((s) => s.trim())
      .includes("otlp")
  ) {
    return Option.none()
  }
  const traces = yield* text("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
  const base = yield* text("OTEL_EXPORTER_OTLP_ENDPOINT")
  const target = Option.isSome(traces)
    ? yield* url("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", traces.value, "")
    : Option.isSome(base)
      ? yield* url("OTEL_EXPORTER_OTLP_ENDPOINT", base.value, "v1/traces")
      : undefined
  if (target === undefined) return Option.none()
  const headerName = Option.isSome(yield* read("OTEL_EXPORTER_OTLP_TRACES_HEADERS"))
    ? "OTEL_EXPORTER_OTLP_TRACES_HEADERS"
    : "OTEL_EXPORTER_OTLP_HEADERS"
  const rawHeaders = yield* read(headerName)
  const parsed = Option.isSome(rawHeaders) ? yield* headers(headerName, Redacted.value(rawHeaders.value)) : {}
  const delay = yield* text("OTEL_BSP_SCHEDULE_DELAY")
  const millis = Option.map(delay, Number)
  if (Option.isSome(millis) && !(Number.isSafeInteger(millis.value) && millis.value >= 0)) {
    return yield* new InvalidConfig({
      keys: ["OTEL_BSP_SCHEDULE_DELAY"],
      detail: "OTEL_BSP_SCHEDULE_DELAY: expected a whole number of milliseconds",
    })
  }
  return Option.some({
    url: target,
    serviceName: Option.getOrElse(yield* text("OTEL_SERVICE_NAME"), () => "bothy"),
    headers: Redacted.make(parsed),
    exportInterval: Option.getOrUndefined(Option.map(millis, Duration.millis)),
  })
})

/** The tracer that exports to `settings`; nothing (Effect's own tracer) when `None`. */
export const layer = (settings: Option.Option<TracingSettings>) =>
  Option.match(settings, {
    onNone: () => Layer.empty,
    onSome: (s) =>
      OtlpTracer.layer({
        url: s.url,
        resource: { serviceName: s.serviceName },
        headers: Redacted.value(s.headers),
        ...(s.exportInterval === undefined ? {} : { exportInterval: s.exportInterval }),
      }).pipe(Layer.provide([OtlpSerialization.layerJson, FetchHttpClient.layer])),
  })
