/**
 * The end-to-end receiver on a thread of its own: the tenants' endpoints, apart from the worker
 * side as they are in production, so that the worker process's CPU can be counted without them.
 * Only the tally crosses the thread boundary, in shared memory the main thread reads as it runs.
 *
 *   main: new Worker(this file, { workerData: { total, shared } })
 *   thread: listening ──{ origin }──> main
 *   thread, per request for event i (payload.i):  arrivedAt[i] (absolute ms), counts (Atomics)
 *   main ──"cpu"──> thread ──threadCpuUsage (µs)──> main
 *
 * Times cross as absolute milliseconds (`performance.timeOrigin + performance.now()`): each thread
 * has its own time origin.
 */
import { parentPort, Worker, workerData } from "node:worker_threads"
import { Effect } from "effect"
import * as WebhookReceiver from "../../testkit/WebhookReceiver.ts"
import * as ThreadMessage from "./ThreadMessage.ts"

interface Shared {
  /** Absolute ms of each event's first arrival; NaN until it arrives. */
  readonly arrivedAt: SharedArrayBuffer
  /** received, duplicates, outOfOrder, unexpected. */
  readonly counts: SharedArrayBuffer
}

interface ReceiverInput {
  readonly total: number
  readonly shared: Shared
}

const RECEIVED = 0
const DUPLICATES = 1
const OUT_OF_ORDER = 2
const UNEXPECTED = 3

/** What the receiver saw, by event index, in this thread's clock. */
export interface Tally {
  readonly arrivedAt: Float64Array
  readonly received: number
  readonly duplicates: number
  readonly outOfOrder: number
  readonly unexpected: number
}

/** Counts one request: first arrivals by event index, duplicates, out of order per path, not ours. */
const counter = (total: number, shared: Shared) => {
  const arrivedAt = new Float64Array(shared.arrivedAt)
  const counts = new Int32Array(shared.counts)
  const lastSequence = new Map<string, number>()
  return ({ path, body, arrivedAt: at }: WebhookReceiver.Request) => {
    let envelope: { readonly sequence: number; readonly data: { readonly i: number } }
    try {
      envelope = JSON.parse(body)
    } catch {
      Atomics.add(counts, UNEXPECTED, 1)
      return
    }
    const i = envelope.data?.i
    if (typeof i !== "number" || i < 0 || i >= total) {
      Atomics.add(counts, UNEXPECTED, 1)
      return
    }
    if (!Number.isNaN(arrivedAt[i]!)) {
      Atomics.add(counts, DUPLICATES, 1)
      return
    }
    arrivedAt[i] = performance.timeOrigin + at
    // After the stamp: a reader that sees the count sees the stamp.
    Atomics.add(counts, RECEIVED, 1)
    if ((lastSequence.get(path) ?? 0) >= envelope.sequence) Atomics.add(counts, OUT_OF_ORDER, 1)
    lastSequence.set(path, envelope.sequence)
  }
}

/** Starts the receiver thread for the scope: its URLs, the live count, the tally and its CPU. */
export const start = (total: number) =>
  Effect.gen(function* () {
    const shared: Shared = {
      arrivedAt: new SharedArrayBuffer(total * Float64Array.BYTES_PER_ELEMENT),
      counts: new SharedArrayBuffer(4 * Int32Array.BYTES_PER_ELEMENT),
    }
    new Float64Array(shared.arrivedAt).fill(Number.NaN)
    const counts = new Int32Array(shared.counts)
    const worker = yield* Effect.acquireRelease(
      Effect.sync(
        () => new Worker(new URL(import.meta.url), { workerData: { total, shared } satisfies ReceiverInput }),
      ),
      (w) => Effect.promise(() => w.terminate()),
    )
    const message = <A>() => ThreadMessage.next<A>(worker).pipe(Effect.orDie)
    const { origin } = yield* message<{ readonly origin: string }>()
    return {
      url: (path: string) => `${origin}${path}`,
      /** First arrivals so far. */
      received: () => Atomics.load(counts, RECEIVED),
      /** CPU the receiver thread has used so far, user + system, in microseconds. */
      cpuMicros: Effect.sync(() => worker.postMessage("cpu")).pipe(Effect.andThen(message<number>())),
      /** The tally as it stands, its times in this thread's `performance.now()`. */
      tally: (): Tally => ({
        arrivedAt: new Float64Array(shared.arrivedAt).map((at) => at - performance.timeOrigin),
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
  const count = counter(input.total, input.shared)
  const program = Effect.gen(function* () {
    const receiver = yield* WebhookReceiver.start(
      (request) => {
        count(request)
        return { status: 200 }
      },
      { keep: false },
    )
    port.on("message", () => {
      const used = process.threadCpuUsage()
      port.postMessage(used.user + used.system)
    })
    port.postMessage({ origin: receiver.origin })
    return yield* Effect.never
  })
  Effect.runFork(Effect.scoped(program))
}
