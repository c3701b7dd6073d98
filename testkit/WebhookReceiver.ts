/**
 * The Standard Webhooks receiver that the tests, the benchmarks and the chaos runs send to: one
 * server on 127.0.0.1 (`LoopbackEndpoint`, the demo's) that answers each request with what its
 * user decides, after verifying it with the public `standardwebhooks` package when a secret is
 * trusted for its path, as a receiver's team would.
 *
 * What it keeps true:
 * - Every request is handed to `answer` once, whole, with its arrival stamps (`performance.now()`
 *   when its headers arrived, the clock a benchmark stamps commits with, and `Date.now()`) and what
 *   its signature check found; the answer goes out as decided: a status (and headers), after a
 *   promise settles (a slow endpoint), or never (a hang, cut when the scope closes).
 * - With `keep` (the default, for tests), each request is kept with the status it got, in `log`
 *   and on the `received` queue a test waits on; a benchmark or a chaos run keeps its own compact
 *   record instead, so a long run does not hold every body.
 *
 * The demo's receiver (`src/demo/DemoReceiver.ts`) stands on the same endpoint; it is in the
 * package, which cannot hold this kit.
 */
import type { IncomingHttpHeaders } from "node:http"
import { Effect, Queue } from "effect"
import { Webhook } from "standardwebhooks"
import * as LoopbackEndpoint from "../src/demo/LoopbackEndpoint.ts"

/** What the signature check found: `undefined` when no secret is trusted for the path. */
export type Signature = { readonly valid: true; readonly payload: unknown } | { readonly valid: false } | undefined

export interface Request {
  readonly method: string
  /** The request's path (its `url`). */
  readonly path: string
  readonly headers: IncomingHttpHeaders
  readonly body: string
  /** `performance.now()` when the headers arrived. */
  readonly arrivedAt: number
  /** `Date.now()` when the headers arrived. */
  readonly at: number
  readonly signature: Signature
}

export interface Answer {
  readonly status: number
  readonly headers?: Record<string, string>
  /** Never answer: the request hangs until the sender gives up or the receiver closes. */
  readonly hang?: boolean
  /** Answer once this settles: a slow endpoint. */
  readonly after?: Promise<unknown>
}

export interface Received {
  readonly method: string
  /** The request's path, as `url` and `path`. */
  readonly url: string
  readonly path: string
  readonly headers: IncomingHttpHeaders
  readonly body: string
  /** The status this receiver answered with. */
  readonly status: number
}

export interface Options {
  /** Keep every request in `log` and on `received` (default true). */
  readonly keep?: boolean
  /** How long an idle keep-alive connection stays open. */
  readonly keepAliveTimeout?: number
}

const signatureOf = (verifier: Webhook | undefined, body: string, headers: IncomingHttpHeaders): Signature => {
  if (verifier === undefined) return undefined
  const header = (name: string) => String(headers[name] ?? "")
  try {
    const payload: unknown = verifier.verify(body, {
      "webhook-id": header("webhook-id"),
      "webhook-timestamp": header("webhook-timestamp"),
      "webhook-signature": header("webhook-signature"),
    })
    return { valid: true, payload }
  } catch {
    return { valid: false }
  }
}

/** Starts the receiver for the length of the scope. */
export const start = (answer: (request: Request) => Answer, options: Options = {}) =>
  Effect.gen(function* () {
    const keep = options.keep ?? true
    const received = yield* Queue.unbounded<Received>()
    const log: Array<Received> = []
    const verifiers = new Map<string, Webhook>()
    const endpoint = yield* LoopbackEndpoint.listen(
      ({ request, response, path, body: bytes, arrivedAt, at, hold }) => {
        const body = bytes.toString("utf8")
        const method = request.method ?? ""
        const signature = signatureOf(verifiers.get(path), body, request.headers)
        const a = answer({ method, path, headers: request.headers, body, arrivedAt, at, signature })
        if (keep) {
          const entry: Received = { method, url: path, path, headers: request.headers, body, status: a.status }
          log.push(entry)
          Queue.offerUnsafe(received, entry)
        }
        const reply = () => response.writeHead(a.status, a.headers ?? {}).end("ok")
        if (a.hang === true) return hold()
        if (a.after === undefined) reply()
        else void a.after.then(reply, reply)
      },
      options.keepAliveTimeout === undefined ? {} : { keepAliveTimeout: options.keepAliveTimeout },
    )
    return {
      origin: endpoint.origin,
      url: (path: string) => `${endpoint.origin}${path}`,
      /** From now on, requests to `path` are verified with `secret` (`whsec_...`, as bothy shows it). */
      trust: (path: string, secret: string) => {
        verifiers.set(path, new Webhook(secret))
      },
      received,
      log,
    }
  })

export type WebhookReceiver = Effect.Success<ReturnType<typeof start>>
