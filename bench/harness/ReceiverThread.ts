/**
 * A benchmark's receiver on a thread of its own: the tenants' endpoints, apart from the worker
 * side as they are in production, so that the worker's thread does not also answer its requests
 * and the worker process's CPU can be counted without them. Only the tally crosses the thread
 * boundary, in shared memory the main thread reads as it runs, and by message.
 *
 *   main: new Worker(this file, { workerData: { total, check, shared } })
 *   thread: listening ──"listening"──> main
 *   thread, per request: arrivedAt (absolute ms) and counts (Atomics), as `check` says;
 *                        "allArrived" once `total` requests passed the check
 *   main ──"cpu"──> thread ──its threadCpuUsage (µs)──> main
 *   main ──"anomalies"──> thread ──what failed the check──> main
 *
 * Two checks:
 * - `byIndex` (end to end): first arrivals by event index (`payload.i`), duplicates, requests out
 *   of order on their path, requests that are not the run's;
 * - `inOrder` (a backlog): path `/s{k}` must get subscription k's next sequence, carrying its next
 *   event (`k + subscriptions × n`); arrivals are stamped in arrival order.
 *
 * Times cross as absolute milliseconds (`performance.timeOrigin + performance.now()`): each thread
 * has its own time origin.
 */
import { parentPort, Worker, workerData } from "node:worker_threads"
import { Effect } from "effect"
import * as WebhookReceiver from "../../testkit/WebhookReceiver.ts"

export type Check = { readonly _tag: "byIndex" } | { readonly _tag: "inOrder"; readonly subscriptions: number }

interface Shared {
  /** Absolute ms of each arrival (by event index, or by arrival order); NaN until then. */
  readonly arrivedAt: SharedArrayBuffer
  /** received, duplicates, outOfOrder, unexpected. */
  readonly counts: SharedArrayBuffer
}

interface ReceiverInput {
  readonly total: number
  readonly check: Check
  readonly shared: Shared
}

type FromThread =
  | { readonly _tag: "listening"; readonly origin: string }
  | { readonly _tag: "cpu"; readonly micros: number }
  | { readonly _tag: "anomalies"; readonly anomalies: ReadonlyArray<string> }
  | { readonly _tag: "allArrived" }

type ToThread = "cpu" | "anomalies"

const RECEIVED = 0
const DUPLICATES = 1
const OUT_OF_ORDER = 2
const UNEXPECTED = 3

/** What the receiver saw, by event index, in the main thread's clock. */
export interface Tally {
  readonly arrivedAt: Float64Array
  readonly received: number
  readonly duplicates: number
  readonly outOfOrder: number
  readonly unexpected: number
}

interface Envelope {
  readonly sequence?: unknown
  readonly data?: { readonly i?: unknown }
}

const parse = (body: string): Envelope | undefined => {
  try {
    return JSON.parse(body)
  } catch {
    return undefined
  }
}

/** The thread's side of one check: counts a request; returns whether `total` have now passed. */
const counter = (input: ReceiverInput, anomalies: Array<string>) => {
  const { total, check, shared } = input
  const arrivedAt = new Float64Array(shared.arrivedAt)
  const counts = new Int32Array(shared.counts)
  // Stamp first, count after: a reader that sees the count sees the stamp.
  const stamp = (slot: number, at: number) => {
    arrivedAt[slot] = performance.timeOrigin + at
    return Atomics.add(counts, RECEIVED, 1) + 1 === total
  }
  if (check._tag === "byIndex") {
    const lastSequence = new Map<string, number>()
    return ({ path, body, arrivedAt: at }: WebhookReceiver.Request): boolean => {
      const envelope = parse(body)
      const i = envelope?.data?.i
      if (typeof i !== "number" || i < 0 || i >= total) {
        Atomics.add(counts, UNEXPECTED, 1)
        return false
      }
      if (!Number.isNaN(arrivedAt[i]!)) {
        Atomics.add(counts, DUPLICATES, 1)
        return false
      }
      const sequence = Number(envelope?.sequence)
      if ((lastSequence.get(path) ?? 0) >= sequence) Atomics.add(counts, OUT_OF_ORDER, 1)
      lastSequence.set(path, sequence)
      return stamp(i, at)
    }
  }
  const next = new Array<number>(check.subscriptions).fill(0)
  return ({ path, body, arrivedAt: at }: WebhookReceiver.Request): boolean => {
    const k = /^\/s(\d+)$/.exec(path) === null ? -1 : Number(path.slice(2))
    const envelope = parse(body)
    const n = next[k]
    const expected = n === undefined ? undefined : { sequence: n + 1, event: k + check.subscriptions * n }
    if (expected === undefined || envelope?.sequence !== expected.sequence || envelope.data?.i !== expected.event) {
      Atomics.add(counts, UNEXPECTED, 1)
      anomalies.push(
        `${path}: sequence ${String(envelope?.sequence)}, event ${String(envelope?.data?.i)} (expected sequence ${expected?.sequence ?? "none"}, event ${expected?.event ?? "none"})`,
      )
      return false
    }
    next[k] = n! + 1
    const received = Atomics.load(counts, RECEIVED)
    return received < total ? stamp(received, at) : false
  }
}

/** Starts the receiver thread for the scope. */
export const start = (total: number, check: Check = { _tag: "byIndex" }) =>
  Effect.gen(function* () {
    const shared: Shared = {
      arrivedAt: new SharedArrayBuffer(total * Float64Array.BYTES_PER_ELEMENT),
      counts: new SharedArrayBuffer(4 * Int32Array.BYTES_PER_ELEMENT),
    }
    new Float64Array(shared.arrivedAt).fill(Number.NaN)
    const counts = new Int32Array(shared.counts)
    const worker = yield* Effect.acquireRelease(
      Effect.sync(
        () => new Worker(new URL(import.meta.url), { workerData: { total, check, shared } satisfies ReceiverInput }),
      ),
      (w) => Effect.promise(() => w.terminate()),
    )
    // Every message the thread sends, by tag, to whoever waits for it.
    const waiting = new Map<FromThread["_tag"], Array<(m: FromThread) => void>>()
    const failures: Array<(e: Error) => void> = []
    let allArrived = false
    const allArrivedWaiters: Array<() => void> = []
    worker.on("message", (m: FromThread) => {
      if (m._tag === "allArrived") {
        allArrived = true
        for (const w of allArrivedWaiters.splice(0)) w()
        return
      }
      waiting.get(m._tag)?.shift()?.(m)
    })
    worker.on("error", (e) => {
      for (const f of failures.splice(0)) f(e)
    })
    const reply = <T extends FromThread["_tag"]>(tag: T, ask?: ToThread) =>
      Effect.callback<Extract<FromThread, { readonly _tag: T }>, Error>((resume) => {
        const list = waiting.get(tag) ?? []
        waiting.set(tag, list)
        list.push((m) => resume(Effect.succeed(m as Extract<FromThread, { readonly _tag: T }>)))
        failures.push((e) => resume(Effect.fail(e)))
        if (ask !== undefined) worker.postMessage(ask)
      }).pipe(Effect.orDie)
    const { origin } = yield* reply("listening")
    const absolute = new Float64Array(shared.arrivedAt)
    const inThisThread = () => absolute.map((at) => at - performance.timeOrigin)
    return {
      url: (path: string) => `${origin}${path}`,
      /** Requests that passed the check so far. */
      received: () => Atomics.load(counts, RECEIVED),
      /** Resolves once `total` requests passed the check. */
      allArrived: new Promise<void>((resolve) => {
        if (allArrived) resolve()
        else allArrivedWaiters.push(resolve)
      }),
      /** CPU the receiver thread has used so far, user + system, in microseconds. */
      cpuMicros: Effect.map(reply("cpu", "cpu"), (m) => m.micros),
      /** `inOrder`: what failed the check. */
      anomalies: Effect.map(reply("anomalies", "anomalies"), (m) => m.anomalies),
      /** `inOrder`: arrival times in arrival order, in this thread's `performance.now()`. */
      arrivals: inThisThread,
      /** `byIndex`: the tally as it stands, its times in this thread's `performance.now()`. */
      tally: (): Tally => ({
        arrivedAt: inThisThread(),
        received: Atomics.load(counts, RECEIVED),
        duplicates: Atomics.load(counts, DUPLICATES),
        outOfOrder: Atomics.load(counts, OUT_OF_ORDER),
        unexpected: Atomics.load(counts, UNEXPECTED),
      }),
    }
  })

if (parentPort !== null && workerData !== null && typeof workerData === "object" && "shared" in workerData) {
  const input = workerData as ReceiverInput
  const port = parentPort
  const post = (m: FromThread) => port.postMessage(m)
  const anomalies: Array<string> = []
  const count = counter(input, anomalies)
  const program = Effect.gen(function* () {
    const receiver = yield* WebhookReceiver.start(
      (request) => {
        if (count(request)) post({ _tag: "allArrived" })
        return { status: 200 }
      },
      { keep: false },
    )
    port.on("message", (ask: ToThread) => {
      if (ask === "anomalies") return post({ _tag: "anomalies", anomalies })
      const used = process.threadCpuUsage()
      post({ _tag: "cpu", micros: used.user + used.system })
    })
    post({ _tag: "listening", origin: receiver.origin })
    return yield* Effect.never
  })
  Effect.runFork(Effect.scoped(program))
}
