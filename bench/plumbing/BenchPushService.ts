/**
 * The push service of the push benchmark: a Web Push service on 127.0.0.1 on a worker thread of
 * its own, which checks every message as a real one does and more, so that a message counts only
 * once it has truly arrived: its VAPID token (RFC 8292) must be an ES256 JWT signed by the
 * benchmark's application server key, for this origin (`aud`), not expired and at most 24 h ahead;
 * `Content-Encoding: aes128gcm` and a `TTL`; and the body must decrypt (RFC 8291) with the private
 * key and auth secret of the subscription its path names, generated here as a browser would, to an
 * envelope whose `event` names the event. Passed: 201. Failed: 401 (VAPID) or 400, and a rejection.
 *
 *   main ──{ subscribe: n }──> thread: n browsers (P-256 key pair, 16 auth bytes) ──json──> main
 *   push request ──headers arrive: stamp──> checks ──> 201 ──arrival (subscription, seq, stamp)──> main
 *   main ──"cpu"──> thread: its own CPU time so far
 *   main ──{ listen }──> thread: LISTEN jobs (a plain `pg` client) ──each `push` NOTIFY: stamp──> main
 *
 * The NOTIFY stamps say when a round's jobs became claimable as the database saw it (a round's
 * `pg_notify('jobs', 'push')` is delivered at its commit), on a thread whose event loop the
 * worker's deliveries do not delay.
 * A bench copy of test/support/PushService.ts (bench code imports nothing from test/), trimmed to
 * what a load test needs: no scripted answers. Its checks (a browser's keys, the VAPID token, the
 * decryption) are exported for the chaos run's push receiver, which makes the same ones. It runs on its own thread so that decrypting and
 * verifying 1,500 messages a second neither waits on nor delays the worker's event loop, and so
 * that its CPU can be taken out of the sender's (`cpuMicros`). One verification per distinct token:
 * a reused token is the same bytes, so its signature check would give the same answer; `aud` and
 * `exp` are still checked on every message.
 *
 * Stamps cross as absolute milliseconds (`performance.timeOrigin + performance.now()`) and are
 * handed back in the main thread's `performance.now()`.
 */
import { createECDH, type ECDH, randomBytes, verify } from "node:crypto"
import { createServer } from "node:http"
import type { AddressInfo } from "node:net"
import { parentPort, Worker, workerData } from "node:worker_threads"
import { Effect } from "effect"
import ece from "http_ece"
import { Client, type ClientConfig } from "pg"
import { verifyingKey } from "../../src/push/PushVapid.ts"

export interface Subscription {
  /** What `PushSubscription.toJSON()` gives the app. */
  readonly endpoint: string
  readonly keys: { readonly p256dh: string; readonly auth: string }
}

export interface Rejection {
  readonly subscription: number
  readonly status: number
  readonly reason: string
}

/** Every message that passed, in order of arrival; `at` in the main thread's `performance.now()`. */
export interface Arrivals {
  readonly subscription: Array<number>
  readonly seq: Array<number>
  readonly at: Array<number>
}

interface ThreadInput {
  readonly applicationServerKey: string
}

type ToThread =
  | { readonly subscribe: number }
  | { readonly cpu: true }
  | { readonly listen: ClientConfig; readonly channel: string; readonly payload: string }
type FromThread =
  | { readonly ready: string }
  | { readonly subscribed: ReadonlyArray<Subscription> }
  | { readonly cpuMicros: number }
  | { readonly listening: true }
  | {
      readonly arrivals: {
        readonly subscription: Int32Array
        readonly seq: Float64Array
        readonly at: Float64Array
      }
      readonly rejections: ReadonlyArray<Rejection>
      readonly notified: Float64Array
    }

/** How often the thread hands over what arrived. */
const flushMillis = 20
const pathPrefix = "/push/"

/** Starts the service for the length of the scope. */
export const start = (applicationServerKey: string) =>
  Effect.gen(function* () {
    const worker = yield* Effect.acquireRelease(
      Effect.sync(() => new Worker(new URL(import.meta.url), { workerData: { applicationServerKey } })),
      (w) => Effect.promise(() => w.terminate()),
    )
    const arrivals: Arrivals = { subscription: [], seq: [], at: [] }
    const rejections: Array<Rejection> = []
    const notified: Array<number> = []
    const replies: Array<{ readonly accepts: (m: FromThread) => boolean; readonly fail: (e: Error) => void }> = []
    let failure: Error | undefined
    worker.on("error", (e) => {
      failure = e
      for (const r of replies.splice(0)) r.fail(e)
    })
    worker.on("message", (m: FromThread) => {
      if ("arrivals" in m) {
        for (let k = 0; k < m.arrivals.at.length; k++) {
          arrivals.subscription.push(m.arrivals.subscription[k]!)
          arrivals.seq.push(m.arrivals.seq[k]!)
          arrivals.at.push(m.arrivals.at[k]! - performance.timeOrigin)
        }
        rejections.push(...m.rejections)
        for (const at of m.notified) notified.push(at - performance.timeOrigin)
        return
      }
      const waiting = replies.findIndex((r) => r.accepts(m))
      if (waiting >= 0) replies.splice(waiting, 1)
    })
    const ask = <A>(message: ToThread | undefined, pick: (m: FromThread) => A | undefined) =>
      Effect.callback<A, Error>((resume) => {
        if (failure !== undefined) return resume(Effect.fail(failure))
        replies.push({
          accepts: (m) => {
            const value = pick(m)
            if (value === undefined) return false
            resume(Effect.succeed(value))
            return true
          },
          fail: (e) => resume(Effect.fail(e)),
        })
        if (message !== undefined) worker.postMessage(message)
      }).pipe(Effect.orDie)

    const url = yield* ask(undefined, (m) => ("ready" in m ? m.ready : undefined))
    return {
      /** `http://127.0.0.1:PORT`, every token's expected `aud`. */
      url,
      /** Makes `n` more browser subscriptions; subscription k's endpoint ends in `/push/k` (k counts from 0). */
      subscribe: (n: number) => ask({ subscribe: n }, (m) => ("subscribed" in m ? m.subscribed : undefined)),
      arrivals,
      rejections,
      /** Messages that passed so far. */
      received: () => arrivals.at.length,
      /**
       * Listens on `channel` (a plain `pg` connection from the service's thread); each notification
       * with `payload` is stamped into `notified` (main-thread `performance.now()`), in order.
       */
      listen: (connection: ClientConfig, channel: string, payload: string) =>
        ask({ listen: connection, channel, payload }, (m) => ("listening" in m ? true : undefined)),
      notified,
      /** CPU time the service's thread has used so far, in µs. */
      cpuMicros: ask({ cpu: true }, (m) => ("cpuMicros" in m ? m.cpuMicros : undefined)),
    }
  })

export type BenchPushService = Effect.Success<ReturnType<typeof start>>

// ---- the checks (the chaos run's push receiver makes them too) -------------------------------------

export interface Browser {
  readonly ecdh: ECDH
  readonly authSecret: Buffer
  /** As `PushSubscription.toJSON()` gives them to the app. */
  readonly keys: Subscription["keys"]
}

/** What a browser generates for a subscription: a P-256 key pair and 16 random auth bytes. */
export const makeBrowser = (): Browser => {
  const ecdh = createECDH("prime256v1")
  ecdh.generateKeys()
  const authSecret = randomBytes(16)
  return {
    ecdh,
    authSecret,
    keys: { p256dh: ecdh.getPublicKey().toString("base64url"), auth: authSecret.toString("base64url") },
  }
}

/** The plaintext of an aes128gcm message (RFC 8291) to `to`, as its browser decrypts it; a reason otherwise. */
export const decrypt = (body: Buffer, to: Browser): Buffer | string => {
  try {
    return ece.decrypt(body, { version: "aes128gcm", privateKey: to.ecdh, authSecret: to.authSecret })
  } catch (error) {
    return `body does not decrypt: ${String(error)}`
  }
}

const jsonOf = (part: string): unknown => {
  try {
    return JSON.parse(Buffer.from(part, "base64url").toString("utf8"))
  } catch {
    return undefined
  }
}

const isRecord = (u: unknown): u is Record<string, unknown> => typeof u === "object" && u !== null

/** The token's claims when `authorization` is `vapid t=<JWT signed by k>, k=<expected key>`; a reason otherwise. */
export const verifyToken = (
  authorization: string | undefined,
  expectedKey: string,
): Record<string, unknown> | string => {
  const scheme = /^vapid\s+(.*)$/i.exec(authorization ?? "")
  if (scheme === null) return "Authorization is not `vapid t=..., k=...`"
  const params = new Map(
    scheme[1]!.split(",").map((pair) => {
      const at = pair.indexOf("=")
      return [pair.slice(0, at).trim(), pair.slice(at + 1).trim()] as const
    }),
  )
  const token = params.get("t")
  const k = params.get("k")
  if (token === undefined || k === undefined) return "Authorization lacks t= or k="
  if (k !== expectedKey) return "k= is not the application server key"
  const key = verifyingKey(k)
  if (key === undefined) return "k= is not an uncompressed P-256 public key"
  const parts = token.split(".")
  if (parts.length !== 3) return "t= is not a JWT"
  const [head, body, signature] = parts as [string, string, string]
  const header = jsonOf(head)
  if (!isRecord(header) || header.alg !== "ES256") return "JWT alg is not ES256"
  const signed = verify(
    "sha256",
    Buffer.from(`${head}.${body}`),
    { key, dsaEncoding: "ieee-p1363" },
    Buffer.from(signature, "base64url"),
  )
  if (!signed) return "JWT signature does not verify against k="
  const claims = jsonOf(body)
  return isRecord(claims) ? claims : "JWT claims are not JSON"
}

/** RFC 8292's claims for `origin` at `nowSeconds`: a reason when they do not hold. */
export const checkClaims = (
  claims: Record<string, unknown>,
  origin: string,
  nowSeconds: number,
): string | undefined => {
  const { aud, exp, sub } = claims
  if (aud !== origin) return `aud ${String(aud)} is not ${origin}`
  if (typeof exp !== "number" || !Number.isInteger(exp)) return "exp is not an integer"
  if (exp <= nowSeconds) return `exp ${exp} has passed (now ${nowSeconds})`
  if (exp > nowSeconds + 24 * 60 * 60) return `exp ${exp} is more than 24 h ahead (now ${nowSeconds})`
  if (typeof sub !== "string" || sub === "") return "sub is missing"
  return undefined
}

/** The event seq the envelope names (`event` is "epoch.seq"), or a reason. */
const seqOf = (plaintext: Buffer): number | string => {
  let envelope: unknown
  try {
    envelope = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(plaintext))
  } catch {
    return "plaintext is not UTF-8 JSON"
  }
  const event = isRecord(envelope) ? envelope.event : undefined
  const match = typeof event === "string" ? /^\d+\.(\d+)$/.exec(event) : null
  return match === null ? "envelope has no event epoch.seq" : Number(match[1])
}

// ---- the thread ----------------------------------------------------------------------------------

const runThread = (input: ThreadInput, port: NonNullable<typeof parentPort>) => {
  const browsers: Array<Browser> = []
  const verified = new Map<string, Record<string, unknown>>()
  let pending = { subscription: [] as Array<number>, seq: [] as Array<number>, at: [] as Array<number> }
  let rejected: Array<Rejection> = []
  let notified: Array<number> = []
  let origin = ""

  const server = createServer((request, response) => {
    const at = performance.timeOrigin + performance.now()
    const chunks: Array<Buffer> = []
    request.on("data", (c: Buffer) => chunks.push(c))
    request.on("end", () => {
      const path = request.url ?? "/"
      const index = path.startsWith(pathPrefix) ? Number(path.slice(pathPrefix.length)) : Number.NaN
      const browser = Number.isInteger(index) ? browsers[index] : undefined
      const refuse = (status: number, reason: string) => {
        rejected.push({ subscription: browser === undefined ? -1 : index, status, reason })
        response.writeHead(status).end(reason)
      }
      if (browser === undefined) return refuse(404, "no such subscription")
      const authorization = request.headers.authorization
      const claims =
        (authorization === undefined ? undefined : verified.get(authorization)) ??
        verifyToken(authorization, input.applicationServerKey)
      if (typeof claims === "string") return refuse(401, claims)
      const wrong = checkClaims(claims, origin, Math.floor(at / 1000))
      if (wrong !== undefined) return refuse(401, wrong)
      verified.set(authorization!, claims)
      if (request.headers["content-encoding"] !== "aes128gcm") return refuse(400, "Content-Encoding is not aes128gcm")
      if (!/^\d+$/.test(String(request.headers.ttl ?? ""))) return refuse(400, "TTL is missing or not a number")
      const plaintext = decrypt(Buffer.concat(chunks), browser)
      if (typeof plaintext === "string") return refuse(400, plaintext)
      const seq = seqOf(plaintext)
      if (typeof seq === "string") return refuse(400, seq)
      pending.subscription.push(index)
      pending.seq.push(seq)
      pending.at.push(at)
      response.writeHead(201).end()
    })
  })

  setInterval(() => {
    if (pending.at.length === 0 && rejected.length === 0 && notified.length === 0) return
    const stamps = Float64Array.from(notified)
    const arrivals = {
      subscription: Int32Array.from(pending.subscription),
      seq: Float64Array.from(pending.seq),
      at: Float64Array.from(pending.at),
    }
    port.postMessage({ arrivals, rejections: rejected, notified: stamps } satisfies FromThread, [
      arrivals.subscription.buffer,
      arrivals.seq.buffer,
      arrivals.at.buffer,
      stamps.buffer,
    ])
    pending = { subscription: [], seq: [], at: [] }
    rejected = []
    notified = []
  }, flushMillis)

  port.on("message", (m: ToThread) => {
    if ("cpu" in m) {
      const used = process.threadCpuUsage()
      port.postMessage({ cpuMicros: used.user + used.system } satisfies FromThread)
      return
    }
    if ("listen" in m) {
      const client = new Client(m.listen)
      client.on("notification", (n) => {
        if (n.channel === m.channel && n.payload === m.payload)
          notified.push(performance.timeOrigin + performance.now())
      })
      void client
        .connect()
        .then(() => client.query(`LISTEN "${m.channel}"`))
        .then(() => port.postMessage({ listening: true } satisfies FromThread))
      return
    }
    const made: Array<Subscription> = []
    for (let n = 0; n < m.subscribe; n++) {
      const fresh = makeBrowser()
      made.push({ endpoint: `${origin}${pathPrefix}${browsers.length}`, keys: fresh.keys })
      browsers.push(fresh)
    }
    port.postMessage({ subscribed: made } satisfies FromThread)
  })

  server.keepAliveTimeout = 60_000
  server.listen(0, "127.0.0.1", () => {
    origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
    port.postMessage({ ready: origin } satisfies FromThread)
  })
}

if (parentPort !== null && isRecord(workerData) && typeof workerData.applicationServerKey === "string") {
  runThread(workerData as unknown as ThreadInput, parentPort)
}
