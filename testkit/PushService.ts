/**
 * The Web Push service fake that the tests and the chaos runs push to: plain HTTP/1.1 on 127.0.0.1
 * (`LoopbackEndpoint`, the demo's), or with `tls` HTTP/2 and HTTP/1.1 by ALPN as the big push
 * services speak (`TlsEndpoint`, trusted through `TestCertificate`), with a path per subscription, each made here as a browser makes
 * one (`WebPushBrowser.makeBrowser`: a P-256 key pair and 16 auth bytes).
 *
 * What it keeps true:
 * - A message counts as `delivered` only when it passes what a real service and the browser check
 *   (`WebPushBrowser.check`: a VAPID token signed by `k=`, for this origin, not expired, at most
 *   24 h ahead, with a `sub`, and `k=` the subscription's application server key when it has one;
 *   aes128gcm with a TTL; a body that decrypts with the browser's keys). One that does not is a
 *   `rejection`, kept with the reason and answered 401 (VAPID) or 400 (the rest), as real services
 *   answer; an unknown path is a rejection answered 404. Nothing is thrown away.
 * - A message that passed is answered by its subscription's script (then 201); a hang is answered
 *   by `release`, or cut when the scope closes. A `gone` subscription answers 410 for good, as one
 *   the browser dropped. With `failuresApart` (a chaos run), a message right after a failure answer
 *   to the same subscription gets 201, so none fails twice in a row.
 * - With `keep` (the default, for tests), every message is in `log` and on a queue a test waits on;
 *   a chaos run keeps its own compact record through `onDelivered` and `onRejected` instead.
 *
 * Times come from the `Clock` of the scope that started it. The push benchmark's service
 * (`bench/push/BenchPushService.ts`) runs the same checks on a thread of its own.
 */
import { randomBytes } from "node:crypto"
import type { IncomingHttpHeaders, OutgoingHttpHeaders } from "node:http"
import { Clock, Effect, Queue } from "effect"
import * as LoopbackEndpoint from "../src/demo/LoopbackEndpoint.ts"
import * as WebPushBrowser from "../src/demo/WebPushBrowser.ts"
import * as TlsEndpoint from "./TlsEndpoint.ts"

export type { VapidClaims } from "../src/demo/WebPushBrowser.ts"

/** What the service answers a message that passed its checks. */
export type Answer =
  | { readonly status: 201 | 202 | 400 | 401 | 403 | 404 | 410 | 413 | 500 | 503 }
  | { readonly status: 429; readonly retryAfter: string }
  /** No answer until `release()` (or the scope closes). */
  | { readonly hang: true }

export interface MessageHeaders {
  readonly ttl: string | undefined
  readonly urgency: string | undefined
  readonly topic: string | undefined
  readonly contentEncoding: string | undefined
}

export interface Delivered {
  readonly endpoint: string
  readonly subscriptionId: string
  readonly plaintext: string
  readonly headers: MessageHeaders
  readonly vapid: WebPushBrowser.VapidClaims
  /** Epoch milliseconds, from the `Clock` of the scope that started the service. */
  readonly receivedAt: number
  /** What the script answered (`undefined` while hanging). */
  readonly status: number | undefined
}

export interface Rejection {
  readonly endpoint: string
  readonly subscriptionId: string | undefined
  readonly reason: string
  readonly headers: MessageHeaders
  readonly receivedAt: number
  readonly status: number
}

export interface BrowserSubscription {
  readonly id: string
  /** What `PushSubscription.toJSON()` gives the app (no `expirationTime`: browsers send null or omit it). */
  readonly json: WebPushBrowser.SubscriptionJson
  /** The browser's private state: its key pair and auth secret. */
  readonly ecdh: WebPushBrowser.Browser["ecdh"]
  readonly authSecret: Buffer
  /** The VAPID public key it was subscribed with (`applicationServerKey`), if any. */
  readonly applicationServerKey: string | undefined
}

export interface Options {
  /** The application server key of subscriptions made without one of their own. */
  readonly applicationServerKey?: string
  /** Keep every message in `log` and on the queues (default true). */
  readonly keep?: boolean
  /** Each message that passed, as it arrives. */
  readonly onDelivered?: (delivered: Delivered) => void
  /** Each message refused, as it arrives. */
  readonly onRejected?: (rejection: Rejection) => void
  /** After a failure answer to a subscription, its next message gets 201 whatever the script says. */
  readonly failuresApart?: boolean
  /** How long an idle keep-alive connection stays open (plain HTTP only). */
  readonly keepAliveTimeout?: number
  /** TLS with `TestCertificate`, HTTP/2 or HTTP/1.1 as the client's ALPN chooses (default: plain HTTP/1.1). */
  readonly tls?: boolean
}

/** What the service answers through: an HTTP/1.1 or an HTTP/2 response. */
interface Reply {
  writeHead(status: number, headers?: OutgoingHttpHeaders): unknown
  end(body: string): unknown
}

interface Arrival {
  readonly request: { readonly headers: IncomingHttpHeaders }
  readonly response: Reply
  readonly path: string
  readonly body: Buffer
  readonly hold: () => void
}

export interface PushService {
  /** `http://127.0.0.1:PORT` (`https` with `tls`), also every token's expected `aud`. */
  readonly url: string
  /** With `tls`: the HTTP/2 sessions and streams, and the HTTP/1.1 requests, so far. */
  readonly counts: () => TlsEndpoint.Counts | undefined
  readonly delivered: Queue.Queue<Delivered>
  readonly rejected: Queue.Queue<Rejection>
  /** Waits for the next `n` delivered messages. */
  readonly take: (n: number) => Effect.Effect<ReadonlyArray<Delivered>>
  /** Waits for the next `n` rejections. */
  readonly takeRejections: (n: number) => Effect.Effect<ReadonlyArray<Rejection>>
  /** Everything delivered and rejected so far, in order of arrival. */
  readonly log: { readonly delivered: ReadonlyArray<Delivered>; readonly rejected: ReadonlyArray<Rejection> }
  /** Answers for the next messages to subscription `id` (or to any, with "all"), in order; then 201. */
  readonly script: (id: string | "all", answers: ReadonlyArray<Answer>) => void
  /** From now on every message to subscription `id` gets 410, as from a subscription the browser dropped. */
  readonly gone: (id: string) => void
  /** Answers every hanging message with `status` (default 201). */
  readonly release: (status?: number) => void
  /** A new browser subscription whose endpoint ends in `/push/<id>` (`browserSubscription` names it for you). */
  readonly subscribe: (id: string, applicationServerKey?: string) => BrowserSubscription
}

const pathPrefix = "/push/"

const headersOf = (headers: Record<string, string | ReadonlyArray<string> | undefined>): MessageHeaders => {
  const one = (name: string) => {
    const value = headers[name]
    return typeof value === "string" ? value : undefined
  }
  return {
    ttl: one("ttl"),
    urgency: one("urgency"),
    topic: one("topic"),
    contentEncoding: one("content-encoding"),
  }
}

const answer = (response: Reply, a: Exclude<Answer, { readonly hang: true }>) => {
  response.writeHead(a.status, "retryAfter" in a ? { "retry-after": a.retryAfter } : {})
  response.end("")
}

const isFailure = (a: Answer) => "hang" in a || a.status >= 300

/** Starts the service for the length of the scope. */
export const start = (options: Options = {}) =>
  Effect.gen(function* () {
    const clock = yield* Clock.Clock
    const keep = options.keep ?? true
    const delivered = yield* Queue.unbounded<Delivered>()
    const rejected = yield* Queue.unbounded<Rejection>()
    const log = { delivered: [] as Array<Delivered>, rejected: [] as Array<Rejection> }
    const subscriptions = new Map<string, BrowserSubscription>()
    const scripts = new Map<string, Array<Answer>>()
    const gone = new Set<string>()
    const failedLast = new Set<string>()
    const hanging: Array<{ readonly response: Reply; readonly entry: { status: number | undefined } }> = []
    let origin = ""

    const nextAnswer = (id: string): Answer => {
      if (gone.has(id)) return { status: 410 }
      if (options.failuresApart === true && failedLast.has(id)) return { status: 201 }
      return scripts.get(id)?.shift() ?? scripts.get("all")?.shift() ?? { status: 201 }
    }

    const reject = (response: Reply, rejection: Rejection) => {
      if (keep) {
        log.rejected.push(rejection)
        Queue.offerUnsafe(rejected, rejection)
      }
      options.onRejected?.(rejection)
      response.writeHead(rejection.status)
      response.end(rejection.reason)
    }

    const onArrival = ({ request, response, path, body, hold }: Arrival) => {
      const receivedAt = clock.currentTimeMillisUnsafe()
      const headers = headersOf(request.headers)
      const id = path.startsWith(pathPrefix) ? path.slice(pathPrefix.length) : ""
      const subscription = subscriptions.get(id)
      const base = { endpoint: `${origin}${path}`, headers, receivedAt }
      if (subscription === undefined) {
        return reject(response, { ...base, subscriptionId: undefined, reason: "no such subscription", status: 404 })
      }
      const checked = WebPushBrowser.check({ headers: request.headers, body }, subscription, {
        origin,
        nowSeconds: Math.floor(receivedAt / 1000),
        applicationServerKey: subscription.applicationServerKey,
      })
      if (!checked.ok) {
        return reject(response, { ...base, subscriptionId: id, reason: checked.reason, status: checked.status })
      }
      const a = nextAnswer(id)
      if (isFailure(a)) failedLast.add(id)
      else failedLast.delete(id)
      const entry = {
        ...base,
        subscriptionId: id,
        plaintext: checked.value.plaintext,
        vapid: checked.value.vapid,
        status: "hang" in a ? undefined : a.status,
      }
      if (keep) {
        log.delivered.push(entry)
        Queue.offerUnsafe(delivered, entry)
      }
      options.onDelivered?.(entry)
      if ("hang" in a) {
        hanging.push({ response, entry })
        hold()
      } else answer(response, a)
    }
    const tls = options.tls === true ? yield* TlsEndpoint.listen(onArrival) : undefined
    const endpoint =
      tls ??
      (yield* LoopbackEndpoint.listen(
        onArrival,
        options.keepAliveTimeout === undefined ? {} : { keepAliveTimeout: options.keepAliveTimeout },
      ))
    origin = endpoint.origin

    const takeN = <A>(queue: Queue.Queue<A>, n: number) =>
      Effect.forEach(Array.from({ length: n }), () => Queue.take(queue))

    const service: PushService = {
      url: origin,
      counts: () => tls?.counts(),
      delivered,
      rejected,
      take: (n) => takeN(delivered, n),
      takeRejections: (n) => takeN(rejected, n),
      log,
      script: (id, answers) => scripts.set(id, [...(scripts.get(id) ?? []), ...answers]),
      gone: (id) => gone.add(id),
      release: (status = 201) => {
        for (const { response, entry } of hanging.splice(0)) {
          entry.status = status
          response.writeHead(status)
          response.end("")
        }
      },
      subscribe: (id, applicationServerKey = options.applicationServerKey) => {
        const { ecdh, authSecret, keys } = WebPushBrowser.makeBrowser()
        const subscription: BrowserSubscription = {
          id,
          json: { endpoint: `${origin}${pathPrefix}${id}`, keys },
          ecdh,
          authSecret,
          applicationServerKey,
        }
        subscriptions.set(id, subscription)
        return subscription
      },
    }
    return service
  })

/** What a browser generates for a subscription: a P-256 key pair and 16 random auth bytes, and their base64url. */
export const browserKeys = WebPushBrowser.makeBrowser

/**
 * A subscription to `service` as a browser makes one: a fresh P-256 key pair and 16 random auth
 * bytes, the endpoint `${service.url}/push/<random id>`. `name` makes the id readable in failures.
 */
export const browserSubscription = (
  service: PushService,
  name = "sub",
  applicationServerKey?: string,
): BrowserSubscription => service.subscribe(`${name}-${randomBytes(9).toString("base64url")}`, applicationServerKey)
