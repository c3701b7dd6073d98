/**
 * W3C trace context as bothy stores it with events and jobs (`trace_parent`) and, when asked,
 * sends it with webhooks (`traceparent`): `00-<trace id>-<span id>-<flags>`. A stored value
 * lets a job, or a delivery, continue the trace of the producer's transaction that appended the
 * event, across processes and however late.
 */
import { Effect, Option, Tracer } from "effect"

/** The `traceparent` of `span`. */
export const format = (span: Tracer.AnySpan) => `00-${span.traceId}-${span.spanId}-${span.sampled ? "01" : "00"}`

/** The current span's `traceparent`, or null outside any span. */
export const current = Effect.currentSpan.pipe(
  Effect.map(format),
  Effect.orElseSucceed(() => null),
)

const shape = /^[0-9a-f]{2}-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/

/** At most this many links on a span that serves many events (OpenTelemetry keeps 128 by default). */
export const maxLinks = 32

/**
 * Links the current span (a round serving a batch) to the traces of the events it read, at most
 * `maxLinks`: one round serves many producers' traces, so it is their link, not their child.
 */
export const linkCurrent = (traceParents: ReadonlyArray<string | null>) =>
  Effect.currentSpan.pipe(
    Effect.flatMap((span) =>
      Effect.sync(() => {
        const links = traceParents
          .slice(0, maxLinks)
          .flatMap((tp) => Option.toArray(parse(tp)).map((linked) => ({ span: linked, attributes: {} })))
        if (links.length > 0) span.addLinks(links)
      }),
    ),
    Effect.ignore,
  )

/** The span a stored `traceparent` names, to parent or link a span with; none for null or a malformed value. */
export const parse = (traceParent: string | null | undefined): Option.Option<Tracer.ExternalSpan> => {
  const match = traceParent == null ? null : shape.exec(traceParent)
  return match === null
    ? Option.none()
    : Option.some(
        Tracer.externalSpan({
          traceId: match[1]!,
          spanId: match[2]!,
          sampled: (Number.parseInt(match[3]!, 16) & 1) === 1,
        }),
      )
}
