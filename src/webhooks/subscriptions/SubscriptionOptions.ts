/**
 * A subscription's two delivery options: a rate limit (requests per second its drainer never
 * exceeds for that endpoint; absent: as fast as the endpoint answers) and extra request headers
 * (an API key a receiver's gateway wants, say).
 *
 * Extra headers can never stand in for the ones bothy sets: names are HTTP tokens, stored in lower
 * case (so `X-Key` and `x-key` are one header), and refused when they name a Standard Webhooks
 * header (any `webhook-*`), a header the transport owns, or the trace header. Values are visible
 * ASCII with inner spaces: no CR or LF, so no header can smuggle another.
 */
import { Schema } from "effect"

/** The most requests per second a subscription's rate limit may allow (a limit, not a promise). */
export const maxRateLimit = 10_000
/** The most extra headers one subscription may carry, and the longest value. */
export const maxHeaders = 20
export const maxHeaderValue = 1_000

/** Names bothy sets or the transport owns, besides every `webhook-*` name. */
export const reservedHeaders: ReadonlySet<string> = new Set([
  "content-type",
  "content-length",
  "content-encoding",
  "transfer-encoding",
  "connection",
  "keep-alive",
  "host",
  "upgrade",
  "te",
  "trailer",
  "expect",
  "traceparent",
  "tracestate",
])

const token = /^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}$/
const visible = /^[\x21-\x7e]([\x20-\x7e]*[\x21-\x7e])?$/

const isReserved = (name: string) => name.startsWith("webhook-") || reservedHeaders.has(name)

/** Why `name` cannot be an extra header's name, or `undefined` when it can. */
const refusedName = (name: string): string | undefined =>
  !token.test(name)
    ? "a header name is an HTTP token (letters, digits, !#$%&'*+.^_`|~-)"
    : isReserved(name.toLowerCase())
      ? `${name} is set by bothy or the transport; an extra header cannot replace it`
      : undefined

export const HeaderValue = Schema.String.check(
  Schema.isMaxLength(maxHeaderValue),
  Schema.makeFilter(
    (value) => visible.test(value) || "a header value is visible ASCII (inner spaces allowed, no CR/LF)",
  ),
)

/**
 * Extra headers as given; `normalize` lowers the names. The names are checked by a filter of the
 * whole record, with the name as the path: a record's key schema filters out keys that fail it
 * rather than refusing them, and a refused header must never silently vanish.
 */
export const ExtraHeaders = Schema.Record(Schema.String, HeaderValue).check(
  Schema.makeFilter((headers) =>
    Object.keys(headers).flatMap((name) => {
      const issue = refusedName(name)
      return issue === undefined ? [] : [{ path: [name], issue }]
    }),
  ),
  Schema.makeFilter((headers) => Object.keys(headers).length <= maxHeaders || `at most ${maxHeaders} extra headers`),
  Schema.makeFilter((headers) => {
    const names = Object.keys(headers).map((name) => name.toLowerCase())
    return new Set(names).size === names.length || "two headers differ only in case"
  }),
)
export type ExtraHeaders = typeof ExtraHeaders.Type

/** Requests per second; fractions allowed (0.5: one request every 2 s). */
export const RateLimit = Schema.Number.check(
  Schema.makeFilter(
    (n) =>
      (Number.isFinite(n) && n > 0 && n <= maxRateLimit) ||
      `a rate limit is requests per second, above 0 and at most ${maxRateLimit}`,
  ),
)

/**
 * The stored headers as a request carries them: names in lower case, and any a hand-written row
 * slipped past validation (a reserved name, a value with CR/LF) left out rather than sent. The
 * sender sets its own headers after these, so even an entry that got through could not replace one.
 */
export const usable = (headers: Readonly<Record<string, unknown>>): Record<string, string> =>
  Object.fromEntries(
    Object.entries(headers).flatMap(([name, value]) =>
      typeof value === "string" && refusedName(name) === undefined && Schema.is(HeaderValue)(value)
        ? [[name.toLowerCase(), value] as const]
        : [],
    ),
  )

/** The stored form: names in lower case. */
export const normalize = (headers: ExtraHeaders): Record<string, string> =>
  Object.fromEntries(Object.entries(headers).map(([name, value]) => [name.toLowerCase(), value]))
