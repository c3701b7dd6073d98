/**
 * A Web Push service on loopback for tests, checking what a real one checks and more: every
 * message must decrypt (aes128gcm, RFC 8291) with the private key and auth secret of the
 * subscription its path names, generated here as a browser would; its VAPID token (RFC 8292) must
 * be an ES256 JWT signed by the `k=` key, for this origin (`aud`), not expired and at most 24 h
 * ahead (`exp`), with a `sub`; and when the subscription was made with an application server key,
 * `k=` must be that key, as push services check.
 *
 * A message that passes is `delivered`, with its plaintext, and answered by the subscription's
 * script (default 201). One that fails is a `rejection`, kept with the reason and answered 401
 * (VAPID) or 400 (the rest), as real services answer; an unknown path is a rejection answered 404.
 * Nothing is thrown away, and each lands on a queue the test waits on.
 *
 * Plain HTTP on 127.0.0.1: a test's outbound policy allows http loopback, as the webhook tests' does.
 */
import { createECDH, type ECDH, randomBytes, verify } from "node:crypto"
import type { ServerResponse } from "node:http"
import { Clock, Effect, Queue } from "effect"
import ece from "http_ece"
import { verifyingKey } from "../../src/push/PushVapid.ts"
import * as LoopbackServer from "./LoopbackServer.ts"

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

export interface VapidClaims {
  readonly aud: string
  readonly exp: number
  readonly sub: string
  /** The `k=` key (base64url) the token was signed with. */
  readonly key: string
  /** The JWT itself, to compare tokens across messages. */
  readonly token: string
}

export interface Delivered {
  readonly endpoint: string
  readonly subscriptionId: string
  readonly plaintext: string
  readonly headers: MessageHeaders
  readonly vapid: VapidClaims
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
  readonly json: { readonly endpoint: string; readonly keys: { readonly p256dh: string; readonly auth: string } }
  /** The browser's private state: its key pair and auth secret. */
  readonly ecdh: ECDH
  readonly authSecret: Buffer
  /** The VAPID public key it was subscribed with (`applicationServerKey`), if any. */
  readonly applicationServerKey: string | undefined
}

export interface PushService {
  /** `http://127.0.0.1:PORT`, also every token's expected `aud`. */
  readonly url: string
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
  /** Answers every hanging message with `status` (default 201). */
  readonly release: (status?: number) => void
  /** @internal used by `browserSubscription` */
  readonly register: (subscription: BrowserSubscription) => void
  readonly defaultApplicationServerKey: string | undefined
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

type Checked<A> = { readonly ok: true; readonly value: A } | { readonly ok: false; readonly reason: string }
const ok = <A>(value: A): Checked<A> => ({ ok: true, value })
const no = (reason: string): Checked<never> => ({ ok: false, reason })

const jsonOf = (part: string): unknown => {
  try {
    return JSON.parse(Buffer.from(part, "base64url").toString("utf8"))
  } catch {
    return undefined
  }
}

const isRecord = (u: unknown): u is Record<string, unknown> => typeof u === "object" && u !== null

/** RFC 8292: `Authorization: vapid t=<JWT>, k=<key>`, the JWT ES256-signed by `k`, its claims valid now. */
const checkVapid = (
  authorization: string | undefined,
  origin: string,
  nowSeconds: number,
  expectedKey: string | undefined,
): Checked<VapidClaims> => {
  const scheme = /^vapid\s+(.*)$/i.exec(authorization ?? "")
  if (scheme === null) return no("Authorization is not `vapid t=..., k=...`")
  const params = new Map(
    scheme[1]!.split(",").map((pair) => {
      const at = pair.indexOf("=")
      return [pair.slice(0, at).trim(), pair.slice(at + 1).trim()] as const
    }),
  )
  const token = params.get("t")
  const k = params.get("k")
  if (token === undefined || k === undefined) return no("Authorization lacks t= or k=")
  const key = verifyingKey(k)
  if (key === undefined) return no("k= is not an uncompressed P-256 public key")
  if (expectedKey !== undefined && k !== expectedKey) return no("k= is not the subscription's applicationServerKey")
  const parts = token.split(".")
  if (parts.length !== 3) return no("t= is not a JWT")
  const [head, body, signature] = parts as [string, string, string]
  const header = jsonOf(head)
  if (!isRecord(header) || header.alg !== "ES256") return no("JWT alg is not ES256")
  const signed = verify(
    "sha256",
    Buffer.from(`${head}.${body}`),
    { key, dsaEncoding: "ieee-p1363" },
    Buffer.from(signature, "base64url"),
  )
  if (!signed) return no("JWT signature does not verify against k=")
  const claims = jsonOf(body)
  if (!isRecord(claims)) return no("JWT claims are not JSON")
  const { aud, exp, sub } = claims
  if (aud !== origin) return no(`aud ${String(aud)} is not ${origin}`)
  if (typeof exp !== "number" || !Number.isInteger(exp)) return no("exp is not an integer")
  if (exp <= nowSeconds) return no(`exp ${exp} has passed (now ${nowSeconds})`)
  if (exp > nowSeconds + 24 * 60 * 60) return no(`exp ${exp} is more than 24 h ahead (now ${nowSeconds})`)
  if (typeof sub !== "string" || sub === "") return no("sub is missing")
  return ok({ aud, exp, sub, key: k, token })
}

const decrypt = (body: Buffer, subscription: BrowserSubscription): Checked<string> => {
  try {
    const plaintext = ece.decrypt(body, {
      version: "aes128gcm",
      privateKey: subscription.ecdh,
      authSecret: subscription.authSecret,
    })
    return ok(new TextDecoder("utf-8", { fatal: true }).decode(plaintext))
  } catch (error) {
    return no(`body does not decrypt: ${String(error)}`)
  }
}

const answer = (response: ServerResponse, a: Exclude<Answer, { readonly hang: true }>) =>
  response.writeHead(a.status, "retryAfter" in a ? { "retry-after": a.retryAfter } : {}).end()

/**
 * Starts the service for the length of the scope. Subscriptions made for it check that tokens are
 * signed by `applicationServerKey` when one is given (here or per subscription).
 */
export const start = (options: { readonly applicationServerKey?: string } = {}) =>
  Effect.gen(function* () {
    const clock = yield* Clock.Clock
    const delivered = yield* Queue.unbounded<Delivered>()
    const rejected = yield* Queue.unbounded<Rejection>()
    const log = { delivered: [] as Array<Delivered>, rejected: [] as Array<Rejection> }
    const subscriptions = new Map<string, BrowserSubscription>()
    const scripts = new Map<string, Array<Answer>>()
    const hanging: Array<{ readonly response: ServerResponse; readonly entry: { status: number | undefined } }> = []
    let origin = ""

    const nextAnswer = (id: string): Answer =>
      scripts.get(id)?.shift() ?? scripts.get("all")?.shift() ?? { status: 201 }

    const reject = (response: ServerResponse, rejection: Rejection) => {
      log.rejected.push(rejection)
      Queue.offerUnsafe(rejected, rejection)
      response.writeHead(rejection.status).end(rejection.reason)
    }

    const server = yield* LoopbackServer.http((request, response, _body, bytes) => {
      const receivedAt = clock.currentTimeMillisUnsafe()
      const path = request.url ?? "/"
      const endpoint = `${origin}${path}`
      const headers = headersOf(request.headers)
      const id = path.startsWith(pathPrefix) ? path.slice(pathPrefix.length) : ""
      const subscription = subscriptions.get(id)
      const base = { endpoint, headers, receivedAt }
      const refuse = (status: number, reason: string) =>
        reject(response, { ...base, subscriptionId: subscription === undefined ? undefined : id, reason, status })
      if (subscription === undefined) return refuse(404, "no such subscription")
      const vapid = checkVapid(
        request.headers.authorization,
        origin,
        Math.floor(receivedAt / 1000),
        subscription.applicationServerKey,
      )
      if (!vapid.ok) return refuse(401, vapid.reason)
      if (headers.contentEncoding !== "aes128gcm") return refuse(400, "Content-Encoding is not aes128gcm")
      if (headers.ttl === undefined || !/^\d+$/.test(headers.ttl)) return refuse(400, "TTL is missing or not a number")
      const plaintext = decrypt(bytes, subscription)
      if (!plaintext.ok) return refuse(400, plaintext.reason)
      const a = nextAnswer(id)
      const entry = {
        ...base,
        subscriptionId: id,
        plaintext: plaintext.value,
        vapid: vapid.value,
        status: "hang" in a ? undefined : a.status,
      }
      log.delivered.push(entry)
      Queue.offerUnsafe(delivered, entry)
      if ("hang" in a) hanging.push({ response, entry })
      else answer(response, a)
    })
    origin = server.origin

    const takeN = <A>(queue: Queue.Queue<A>, n: number) =>
      Effect.forEach(Array.from({ length: n }), () => Queue.take(queue))

    const service: PushService = {
      url: origin,
      delivered,
      rejected,
      take: (n) => takeN(delivered, n),
      takeRejections: (n) => takeN(rejected, n),
      log,
      script: (id, answers) => scripts.set(id, [...(scripts.get(id) ?? []), ...answers]),
      release: (status = 201) => {
        for (const { response, entry } of hanging.splice(0)) {
          entry.status = status
          response.writeHead(status).end()
        }
      },
      register: (subscription) => subscriptions.set(subscription.id, subscription),
      defaultApplicationServerKey: options.applicationServerKey,
    }
    return service
  })

/** What a browser generates for a subscription: a P-256 key pair and 16 random auth bytes, and their base64url. */
export const browserKeys = () => {
  const ecdh = createECDH("prime256v1")
  ecdh.generateKeys()
  const authSecret = randomBytes(16)
  return {
    ecdh,
    authSecret,
    keys: { p256dh: ecdh.getPublicKey().toString("base64url"), auth: authSecret.toString("base64url") },
  }
}

/**
 * A subscription to `service` as a browser makes one: a fresh P-256 key pair and 16 random auth
 * bytes, the endpoint `${service.url}/push/<random id>`. `name` makes the id readable in failures.
 */
export const browserSubscription = (
  service: PushService,
  name = "sub",
  applicationServerKey = service.defaultApplicationServerKey,
): BrowserSubscription => {
  const { ecdh, authSecret, keys } = browserKeys()
  const id = `${name}-${randomBytes(9).toString("base64url")}`
  const subscription: BrowserSubscription = {
    id,
    json: { endpoint: `${service.url}${pathPrefix}${id}`, keys },
    ecdh,
    authSecret,
    applicationServerKey,
  }
  service.register(subscription)
  return subscription
}
