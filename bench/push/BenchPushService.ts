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
 * Its checks are the ones every push fake makes (`WebPushBrowser.check`, which the demo's service and
 * `testkit/PushService.ts` run too); what is its own is the load test's shape: no scripted answers,
 * compact arrivals, and a thread of its own, so that decrypting and
 * verifying 1,500 messages a second neither waits on nor delays the worker's event loop, and so
 * that its CPU can be taken out of the sender's (`cpuMicros`). One verification per distinct token:
 * a reused token is the same bytes, so its signature check would give the same answer; `aud` and
 * `exp` are still checked on every message.
 *
 * Sampling (`sample`, for the fan-out part only, which the issue allows to verify "a seeded sample
 * of the messages, never fewer than 1 in 10"): a message to a subscription outside the seeded sample
 * gets every check but the browser's decryption (`WebPushBrowser.checkSealed`), and arrives with
 * seq -1. Every message, opened or not, arrives with its `Topic`, which bothy derives from the
 * event and the registration (`PushMessageKey`), so the benchmark still ties each one to its event.
 * The seed is the benchmark's, so the sender cannot know which messages are opened.
 *
 * Stamps cross as absolute milliseconds (`performance.timeOrigin + performance.now()`) and are
 * handed back in the main thread's `performance.now()`.
 */
import { createServer } from "node:http"
import type { AddressInfo } from "node:net"
import { parentPort, Worker, workerData } from "node:worker_threads"
import { Effect } from "effect"
import { Client, type ClientConfig } from "pg"
import * as WebPushBrowser from "../../src/demo/WebPushBrowser.ts"

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

/**
 * Every message that passed, in order of arrival; `at` in the main thread's `performance.now()`;
 * `seq` -1 for a message outside the sample (not decrypted); `topic` its `Topic` header ("" for none).
 */
export interface Arrivals {
  readonly subscription: Array<number>
  readonly seq: Array<number>
  readonly at: Array<number>
  readonly topic: Array<string>
}

/** Which messages are decrypted: those to subscriptions `index` with `sampled(sample, index)`. */
export interface Sample {
  /** One in `every` subscriptions (1: all). */
  readonly every: number
  readonly seed: number
}

/** Whether subscription `index` is in the sample: a multiplicative hash of the index, mixed with the seed. */
export const sampled = (sample: Sample, index: number): boolean =>
  sample.every <= 1 || (Math.imul(index ^ sample.seed, 0x9e3779b1) >>> 0) % sample.every === 0

interface ThreadInput {
  readonly applicationServerKey: string
}

type ToThread =
  | { readonly subscribe: number }
  | { readonly cpu: true }
  | { readonly sample: Sample }
  | { readonly listen: ClientConfig; readonly channel: string; readonly payload: string }
type FromThread =
  | { readonly ready: string }
  | { readonly subscribed: ReadonlyArray<Subscription> }
  | { readonly cpuMicros: number }
  | { readonly listening: true }
  | { readonly sampling: Sample }
  | {
      readonly arrivals: {
        readonly subscription: Int32Array
        readonly seq: Float64Array
        readonly at: Float64Array
        readonly topic: ReadonlyArray<string>
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
    const arrivals: Arrivals = { subscription: [], seq: [], at: [], topic: [] }
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
          arrivals.topic.push(m.arrivals.topic[k]!)
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
      /** From now on, decrypts only the messages to subscriptions in `sample` (see the header). */
      sample: (sample: Sample) => ask({ sample }, (m) => ("sampling" in m ? m.sampling : undefined)),
      /** CPU time the service's thread has used so far, in µs. */
      cpuMicros: ask({ cpu: true }, (m) => ("cpuMicros" in m ? m.cpuMicros : undefined)),
    }
  })

export type BenchPushService = Effect.Success<ReturnType<typeof start>>

const isRecord = (u: unknown): u is Record<string, unknown> => typeof u === "object" && u !== null

/** The event seq the envelope names (`event` is "epoch.seq"), or a reason. */
const seqOf = (plaintext: string): number | string => {
  let envelope: unknown
  try {
    envelope = JSON.parse(plaintext)
  } catch {
    return "plaintext is not JSON"
  }
  const event = isRecord(envelope) ? envelope.event : undefined
  const match = typeof event === "string" ? /^\d+\.(\d+)$/.exec(event) : null
  return match === null ? "envelope has no event epoch.seq" : Number(match[1])
}

// ---- the thread ----------------------------------------------------------------------------------

const runThread = (input: ThreadInput, port: NonNullable<typeof parentPort>) => {
  const browsers: Array<WebPushBrowser.Browser> = []
  const verified = new Map<string, WebPushBrowser.VerifiedToken>()
  const empty = () => ({
    subscription: [] as Array<number>,
    seq: [] as Array<number>,
    at: [] as Array<number>,
    topic: [] as Array<string>,
  })
  let pending = empty()
  let sample: Sample = { every: 1, seed: 0 }
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
      const message = { headers: request.headers, body: Buffer.concat(chunks) }
      const service = {
        origin,
        nowSeconds: Math.floor(at / 1000),
        applicationServerKey: input.applicationServerKey,
        verified,
      }
      let seq = -1
      if (sampled(sample, index)) {
        const checked = WebPushBrowser.check(message, browser, service)
        if (!checked.ok) return refuse(checked.status, checked.reason)
        const opened = seqOf(checked.value.plaintext)
        if (typeof opened === "string") return refuse(400, opened)
        seq = opened
      } else {
        const checked = WebPushBrowser.checkSealed(message, service)
        if (!checked.ok) return refuse(checked.status, checked.reason)
      }
      pending.subscription.push(index)
      pending.seq.push(seq)
      pending.at.push(at)
      pending.topic.push(String(request.headers.topic ?? ""))
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
      topic: pending.topic,
    }
    port.postMessage({ arrivals, rejections: rejected, notified: stamps } satisfies FromThread, [
      arrivals.subscription.buffer,
      arrivals.seq.buffer,
      arrivals.at.buffer,
      stamps.buffer,
    ])
    pending = empty()
    rejected = []
    notified = []
  }, flushMillis)

  port.on("message", (m: ToThread) => {
    if ("cpu" in m) {
      const used = process.threadCpuUsage()
      port.postMessage({ cpuMicros: used.user + used.system } satisfies FromThread)
      return
    }
    if ("sample" in m) {
      sample = m.sample
      port.postMessage({ sampling: sample } satisfies FromThread)
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
      const fresh = WebPushBrowser.makeBrowser()
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
