/**
 * One webhook delivery attempt: a single POST whose every outcome is a classified `SendResult`,
 * never an error, so the caller records it and decides about retries from `status`, `errorClass`
 * and `retryAfter` alone.
 *
 * What it keeps true:
 * - Nothing is sent to a refused target. The URL is checked before connecting (scheme,
 *   credentials, IP literals: `parseTarget`), and the socket resolves host names through
 *   `safeLookup`, so the address actually dialed is checked, after any DNS change since the
 *   webhook was created.
 * - Redirects are never followed: the policy judged the URL, not wherever a redirect points. A
 *   3xx is a result (`errorClass: "redirect"`). undici 8 follows redirects only when a `redirect`
 *   interceptor is composed in, and none is.
 * - Bounded: an oversized request body is refused before connecting; at most `maxResponseBytes`
 *   of the response body are read, then the connection is dropped; connecting and the whole
 *   exchange each have a time limit.
 *
 * By default each call uses its own undici `Agent`, destroyed when the call ends, so no
 * connection (and no resolved address) outlives the attempt that checked it. A caller sending many
 * requests to one target in a short while (a drainer working through a subscription's backlog)
 * may pass its own `Connections` instead, made with the same policy and limits: its keep-alive
 * connections were each checked when dialed, and they end when the caller closes them.
 */
import { rootCertificates } from "node:tls"
import { Clock, Duration, Effect, Redacted, Result } from "effect"
import { Agent } from "undici"
import { LruCache } from "../platform/LruCache.ts"
import { safeLookup } from "./CheckedDialer.ts"
import * as Exchange from "./Exchange.ts"
import { type HostRefusal, hostRefusal, parseTarget, type TargetPolicy, UnsafeWebhookTarget } from "./OutboundTarget.ts"

/**
 * Why an attempt got no usable answer. `auth_token`: the endpoint's OAuth2 token could not be had,
 * so the request never went out (its caller fills that in; `send` itself never gives it).
 */
export type ErrorClass = "dns" | "connect" | "tls" | "timeout" | "blocked_ip" | "redirect" | "too_large" | "auth_token"

export interface SendRequest {
  readonly url: string
  readonly headers: Record<string, string>
  /** Text is sent as UTF-8; bytes (an encrypted push message) as they are. */
  readonly body: string | Uint8Array
}

export interface SendResult {
  /** The response status; `undefined` when no response arrived. */
  readonly status: number | undefined
  /** Why the attempt did not end in a followed-through response; `undefined` for any non-3xx response. */
  readonly errorClass: ErrorClass | undefined
  /** The response body as UTF-8, cut on a character boundary to at most `maxResponseBytes` bytes. */
  readonly body: string
  /** Whether the response body was longer than what `body` holds. */
  readonly truncated: boolean
  readonly durationMs: number
  /** The raw `Retry-After` header, for the caller to interpret. */
  readonly retryAfter: string | undefined
  /** Why the target policy refused it (`blocked_ip`): reason and detail, without the URL (its path may hold a secret). */
  readonly refusal?: string
}

export interface SendLimits {
  /** DNS lookup, TCP connect and TLS handshake together. */
  readonly connectTimeout: Duration.Input
  /** The whole attempt, from connecting to the end of the response body. */
  readonly totalTimeout: Duration.Input
  /** Request bodies above this many bytes (UTF-8 for text) are refused (`too_large`) without connecting. */
  readonly maxRequestBytes: number
  /** Response body bytes kept; the rest is not read. */
  readonly maxResponseBytes: number
}

// Durations as values, not text: `Effect.timeoutOrElse` would parse the text again for every request.
export const defaultLimits: SendLimits = {
  connectTimeout: Duration.seconds(5),
  totalTimeout: Duration.seconds(15),
  maxRequestBytes: 64 * 1024,
  maxResponseBytes: 20_000,
}

type Outcome = Omit<SendResult, "durationMs">

/** Connections shared by the sends of one caller; see the module header. */
export interface Connections {
  readonly agent: Agent
}

/** How shared connections speak, beyond the policy and limits. */
export interface ConnectionOptions {
  /**
   * Offer HTTP/2 by ALPN and, with a server that takes it, multiplex every request to its origin
   * on one connection (undici's `allowH2`; the dialer, and so the address check, is the same).
   */
  readonly http2?: boolean
  /** Certificates (PEM) trusted besides the system's: a test's own CA. */
  readonly extraCa?: ReadonlyArray<string>
  /**
   * Certificates (PEM) trusted *instead of* the system's: an endpoint behind a private PKI. A
   * public CA then cannot vouch for that endpoint at all.
   */
  readonly trustOnly?: string
  /**
   * A client certificate (PEM, chain allowed) and its key, presented in every handshake (mTLS).
   * Connections made with one belong to it alone: keep one `Connections` per identity.
   */
  readonly clientCertificate?: { readonly cert: string; readonly key: Redacted.Redacted<string> }
}

/** The trusted roots of `options`, as `tls.connect` takes them; `undefined`: the system's. */
const caOf = (options: ConnectionOptions): ReadonlyArray<string> | string | undefined =>
  options.trustOnly ?? (options.extraCa === undefined ? undefined : [...rootCertificates, ...options.extraCa])

const makeAgent = (policy: TargetPolicy, limits: SendLimits, options: ConnectionOptions = {}) => {
  const ca = caOf(options)
  const client = options.clientCertificate
  return new Agent({
    connect: {
      lookup: safeLookup(policy),
      timeout: Duration.toMillis(limits.connectTimeout),
      ...(ca === undefined ? {} : { ca: typeof ca === "string" ? ca : [...ca] }),
      ...(client === undefined ? {} : { cert: client.cert, key: Redacted.value(client.key) }),
    },
    ...(options.http2 === undefined ? {} : { allowH2: options.http2 }),
  })
}

/** Keep-alive connections checked by `policy` when dialed, destroyed when the scope closes. */
export const connections = (policy: TargetPolicy, limits: Partial<SendLimits> = {}, options: ConnectionOptions = {}) =>
  Effect.acquireRelease(
    Effect.sync((): Connections => ({ agent: makeAgent(policy, { ...defaultLimits, ...limits }, options) })),
    ({ agent }) => Effect.ignore(Effect.tryPromise(() => agent.destroy())),
  )

const failed = (errorClass: ErrorClass, refusal?: string): Outcome => ({
  status: undefined,
  errorClass,
  body: "",
  truncated: false,
  retryAfter: undefined,
  ...(refusal === undefined ? {} : { refusal }),
})

const refusalOf = (e: UnsafeWebhookTarget) => `${e.reason}: ${e.detail}`

// A URL checks out the same way under the same policy every time (no DNS is involved), and a
// subscription's URL is sent to again and again: parsing and checking it for each request was
// 3.7 % of the webhook worker's main thread. The URL kept is only read, never changed. A push
// fan-out sends to more distinct URLs than any cache keeps, all on a few push services: the
// verdict on a scheme and host is kept apart, so a URL not seen before is only parsed. (A verdict
// is boxed: `undefined`, "they pass", is also how the cache says "not kept".)
const checkedTargets = new WeakMap<
  TargetPolicy,
  {
    readonly urls: LruCache<string, Result.Result<URL, UnsafeWebhookTarget>>
    readonly hosts: LruCache<string, { readonly refusal: HostRefusal }>
  }
>()

const checkedTarget = (raw: string, policy: TargetPolicy) => {
  let cache = checkedTargets.get(policy)
  if (cache === undefined) {
    cache = { urls: new LruCache(10_000), hosts: new LruCache(1_000) }
    checkedTargets.set(policy, cache)
  }
  const { hosts } = cache
  return cache.urls.getOrSet(raw, () =>
    parseTarget(
      raw,
      policy,
      (url) =>
        hosts.getOrSet(`${url.protocol}//${url.hostname}`, () => ({ refusal: hostRefusal(url, policy) })).refusal,
    ),
  )
}

const decoder = new TextDecoder("utf-8")

/**
 * Decodes at most `max` bytes of `bytes` as UTF-8, never splitting a character. Invalid bytes
 * decode to U+FFFD, which takes three bytes, so the decoded text is measured again and cut once
 * more if it grew past `max`.
 */
export const utf8Prefix = (bytes: Uint8Array, max: number): { readonly text: string; readonly truncated: boolean } => {
  let end = bytes.length
  if (end > max) {
    end = max
    // A continuation byte (10xxxxxx) at the cut means a character straddles it: cut before its
    // lead byte instead. A character has at most three continuation bytes.
    while (end > max - 3 && end > 0 && (bytes[end]! & 0xc0) === 0x80) end--
  }
  const text = decoder.decode(bytes.subarray(0, end))
  if (Buffer.byteLength(text, "utf8") <= max) return { text, truncated: end < bytes.length }
  return { text: utf8Prefix(Buffer.from(text, "utf8"), max).text, truncated: true }
}

/** What an answer becomes: its body cut to `max` bytes on a character boundary; a 3xx is a `redirect`. */
const outcomeOf = ({ status, bytes, retryAfter }: Exchange.Answer, max: number): Outcome => {
  const { text, truncated } = utf8Prefix(bytes, max)
  return {
    status,
    errorClass: status >= 300 && status < 400 ? "redirect" : undefined,
    body: text,
    truncated,
    retryAfter,
  }
}

const dnsCodes = new Set(["ENOTFOUND", "EAI_AGAIN", "EAI_NONAME", "EAI_NODATA", "EAI_FAIL", "ENODATA"])
const timeoutCodes = new Set([
  "ETIMEDOUT",
  "UND_ERR_CONNECT_TIMEOUT",
  "UND_ERR_HEADERS_TIMEOUT",
  "UND_ERR_BODY_TIMEOUT",
])
// OpenSSL reports handshake failures as ERR_SSL_*, Node's TLS layer as ERR_TLS_*, and certificate
// verification by the X509 error name (CERT_HAS_EXPIRED, DEPTH_ZERO_SELF_SIGNED_CERT, ...).
const tlsCode = /^(ERR_SSL_|ERR_TLS_|ERR_OSSL_|CERT_|UNABLE_TO_|DEPTH_ZERO_|SELF_SIGNED_|HOSTNAME_MISMATCH)/

/** The error and everything it wraps: `cause` chains and the attempts of an `AggregateError`. */
const chainOf = (error: unknown): ReadonlyArray<unknown> => {
  const seen: Array<unknown> = []
  const visit = (e: unknown) => {
    if (e === undefined || e === null || seen.includes(e) || seen.length > 32) return
    seen.push(e)
    if (e instanceof AggregateError) e.errors.forEach(visit)
    if (typeof e === "object" && "cause" in e) visit(e.cause)
  }
  visit(error)
  return seen
}

/**
 * Which class a failed exchange belongs to. A refusal by the target policy wins over anything
 * else; a transport error nobody anticipated (the server closing the socket before answering,
 * say) counts as `connect`.
 */
export const classify = (error: unknown): ErrorClass => {
  const chain = chainOf(error)
  if (chain.some((e) => e instanceof UnsafeWebhookTarget)) return "blocked_ip"
  const codes = chain.flatMap((e) =>
    typeof e === "object" && e !== null && "code" in e && typeof e.code === "string" ? [e.code] : [],
  )
  if (codes.some((code) => dnsCodes.has(code))) return "dns"
  if (codes.some((code) => timeoutCodes.has(code))) return "timeout"
  if (codes.some((code) => tlsCode.test(code))) return "tls"
  return "connect"
}

/**
 * Sends one POST and classifies what happened. Never fails: a refused URL (bad scheme,
 * credentials, blocked address) is `blocked_ip`, whatever the reason, because the result has no
 * other class for "the policy said no".
 *
 * Every delivery and push goes through here, so it is kept to a few Effect steps: the span (no
 * stack trace), the clock, and one callback around the request. The total limit is an abort of
 * the request on a timer, as undici's own connect limit is, not a race of fibers: the race and
 * `Effect.fn`'s stack traces were 49 Effect operations and 6 resumptions a request, more than half
 * of the request's own CPU.
 */
export const send = (
  request: SendRequest,
  policy: TargetPolicy,
  limits: Partial<SendLimits> = {},
  shared?: Connections,
): Effect.Effect<SendResult> =>
  timed(request, policy, { ...defaultLimits, ...limits }, shared).pipe(
    Effect.withSpan("OutboundSender.send", {}, { captureStackTrace: false }),
  )

const timed = (request: SendRequest, policy: TargetPolicy, limits: SendLimits, shared: Connections | undefined) =>
  Effect.flatMap(Clock.currentTimeMillis, (started) =>
    Effect.flatMap(attempt(request, policy, limits, shared), (outcome) =>
      Effect.map(Clock.currentTimeMillis, (finished): SendResult => ({ ...outcome, durationMs: finished - started })),
    ),
  )

/** Why an exchange was cut short: its total limit passed, or the fiber waiting for it was interrupted. */
class ExchangeTimedOut extends Error {}
class ExchangeInterrupted extends Error {}

/**
 * Runs the exchange, aborted when the fiber is interrupted or when the total limit passes,
 * whichever comes first; the timer is cleared as it ends.
 */
const withinLimit = (
  limitMillis: number,
  start: (done: (ended: Exchange.Ended) => void) => (reason: Error) => void,
): Effect.Effect<Exchange.Ended | "timeout"> =>
  Effect.callback((resume) => {
    let timedOut = false
    let over = false
    let timer: ReturnType<typeof setTimeout> | undefined
    const abort = start((ended) => {
      over = true
      clearTimeout(timer)
      resume(Effect.succeed(timedOut ? "timeout" : ended))
    })
    // An exchange that could not start has ended already: no timer for it.
    if (!over)
      timer = setTimeout(() => {
        timedOut = true
        abort(new ExchangeTimedOut(`no answer within ${limitMillis} ms`))
      }, limitMillis)
    return Effect.sync(() => {
      clearTimeout(timer)
      abort(new ExchangeInterrupted("the send was interrupted"))
    })
  })

const failedWith = (error: unknown): Effect.Effect<Outcome> => {
  const errorClass = classify(error)
  const refused = chainOf(error).find((e): e is UnsafeWebhookTarget => e instanceof UnsafeWebhookTarget)
  return Effect.as(
    Effect.logDebug("webhook send failed", errorClass, String(error)),
    failed(errorClass, refused === undefined ? undefined : refusalOf(refused)),
  )
}

const attempt = (
  request: SendRequest,
  policy: TargetPolicy,
  limits: SendLimits,
  shared: Connections | undefined,
): Effect.Effect<Outcome> => {
  if (Buffer.byteLength(request.body, "utf8") > limits.maxRequestBytes) return Effect.succeed(failed("too_large"))
  const target = checkedTarget(request.url, policy)
  if (Result.isFailure(target)) {
    // Not the URL: its path may hold a secret.
    const refusal = refusalOf(target.failure)
    return Effect.as(Effect.logDebug("webhook target refused", refusal), failed("blocked_ip", refusal))
  }
  const limitMillis = Duration.toMillis(limits.totalTimeout)
  const url = target.success
  const exchangeWith = (agent: Agent) =>
    Effect.flatMap(
      withinLimit(limitMillis, (done) =>
        Exchange.post(
          agent,
          { origin: url.origin, path: `${url.pathname}${url.search}` },
          request,
          limits.maxResponseBytes,
          done,
        ),
      ),
      (ended) =>
        ended === "timeout"
          ? Effect.succeed(failed("timeout"))
          : "error" in ended
            ? failedWith(ended.error)
            : Effect.succeed(outcomeOf(ended.answer, limits.maxResponseBytes)),
    )
  return shared === undefined
    ? Effect.acquireUseRelease(
        Effect.sync(() => makeAgent(policy, limits)),
        exchangeWith,
        // Destroying (not closing) drops a connection still streaming a body we stopped reading.
        (agent) => Effect.ignore(Effect.tryPromise(() => agent.destroy())),
      )
    : exchangeWith(shared.agent)
}
