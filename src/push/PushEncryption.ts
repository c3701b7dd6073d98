/**
 * Where push messages are encrypted: on threads of their own, so that aes128gcm and its ECDH
 * (about 0.2 ms of CPU per message, most of it the ECDH of a fresh key pair for each) never hold up the
 * worker's event loop, on which the rounds, the job claims and every other delivery wait.
 *
 * What it keeps true:
 * - The request is exactly the one `PushRequest.requestOf` makes (the threads run its `bodyOf`,
 *   this thread its `requestWith`), and `PushPayloadTooLarge` comes back as the same typed failure.
 * - A thread that dies (an uncaught error, a `process.exit` in a dependency) fails only the
 *   messages it had in hand, as defects, so their jobs are retried; the next message starts a
 *   fresh thread in its place.
 * - An interrupted build leaves nothing behind: its answer, when it comes, is dropped.
 * - Closing the scope terminates the threads; they never keep the process alive on their own.
 *
 * With 0 threads, messages are encrypted on the calling fiber's thread. The default is one thread
 * per core (`PushConfig`): the threads are where a push's CPU goes.
 */
import { Worker } from "node:worker_threads"
import { Effect, type Scope } from "effect"
import type { SendRequest } from "../outbound/OutboundSender.ts"
import type { Answer, Built, Question } from "./PushEncryptionProtocol.ts"
import * as PushRequest from "./PushRequest.ts"

export type Build = Effect.Effect<SendRequest, PushRequest.PushPayloadTooLarge>

export interface PushEncryption {
  readonly build: (input: PushRequest.PushRequestInput) => Build
  /**
   * Many messages in one go (a batch's), split across the threads in a message each: a message
   * to a thread and back costs as much as an encryption, so a batch pays it once per thread. Each
   * input's outcome is its own effect, in order.
   */
  readonly buildMany: (inputs: ReadonlyArray<PushRequest.PushRequestInput>) => Effect.Effect<ReadonlyArray<Build>>
}

/** A defect of encryption: a key was refused (`PushEncryptionRecord.PushKeyRefused`), or the thread died with the message in hand. */
export class PushEncryptionDefect extends Error {
  override readonly name = "PushEncryptionDefect"
}

// The thread's module sits beside this one, as .ts when run from the sources, .js when built.
const defaultThread = new URL(
  import.meta.url.endsWith(".ts") ? "./PushEncryptionThread.ts" : "./PushEncryptionThread.js",
  import.meta.url,
)

interface Slot {
  worker: Worker | undefined
  readonly waiting: Map<number, (answer: Answer) => void>
}

const start = (slot: Slot, thread: URL) => {
  const worker = new Worker(thread)
  worker.unref()
  worker.on("message", (answer: Answer) => {
    const resume = slot.waiting.get(answer.id)
    slot.waiting.delete(answer.id)
    resume?.(answer)
  })
  const died = (why: string) => {
    if (slot.worker !== worker) return
    slot.worker = undefined
    const waiting = [...slot.waiting.values()]
    slot.waiting.clear()
    for (const resume of waiting) resume({ id: -1, defect: `the push encryption thread ${why}` })
  }
  worker.on("error", (error) => died(`failed: ${error.message}`))
  worker.on("exit", (code) => died(`exited with code ${code}`))
  slot.worker = worker
  return worker
}

const answered = (input: PushRequest.PushRequestInput, built: Built): Build =>
  "body" in built
    ? Effect.succeed(PushRequest.requestWith(input, built.body))
    : "tooLarge" in built
      ? Effect.fail(new PushRequest.PushPayloadTooLarge(built.tooLarge))
      : Effect.die(new PushEncryptionDefect(built.defect))

/**
 * A question to a thread and its answer cost about 0.1 ms of CPU between the two threads, so a
 * thread takes at least this many messages: a push job of 3 registrations asks one thread, not two.
 */
const minPerThread = 8

/** `inputs` cut into at most `parts` runs of nearly equal length, in order. */
const split = <A>(inputs: ReadonlyArray<A>, parts: number): Array<ReadonlyArray<A>> => {
  const size = Math.ceil(inputs.length / Math.max(1, parts))
  return Array.from({ length: Math.ceil(inputs.length / size) }, (_, k) => inputs.slice(k * size, (k + 1) * size))
}

/**
 * `threads` encryption threads for the scope's lifetime (0: encrypt on the caller's thread).
 * `thread` is the threads' module, for tests that need one that dies.
 */
export const make = (
  threads: number,
  thread: URL = defaultThread,
): Effect.Effect<PushEncryption, never, Scope.Scope> =>
  threads <= 0
    ? Effect.succeed({
        build: PushRequest.build,
        buildMany: (inputs) => Effect.succeed(inputs.map((input) => PushRequest.build(input))),
      })
    : Effect.gen(function* () {
        const slots: Array<Slot> = Array.from({ length: threads }, () => ({ worker: undefined, waiting: new Map() }))
        yield* Effect.addFinalizer(() =>
          Effect.promise(() => Promise.all(slots.map((slot) => slot.worker?.terminate()))).pipe(Effect.ignore),
        )
        let next = 0
        const partsOf = (messages: number) => Math.min(threads, Math.ceil(messages / minPerThread))
        const ask = (inputs: ReadonlyArray<PushRequest.PushRequestInput>) =>
          Effect.callback<ReadonlyArray<Build>>((resume) => {
            // The least busy thread, so one slow question does not queue others behind it.
            const slot = slots.reduce((a, b) => (b.waiting.size < a.waiting.size ? b : a))
            const worker = slot.worker ?? start(slot, thread)
            const id = next++
            slot.waiting.set(id, (answer: Answer) =>
              resume(
                Effect.succeed(
                  "built" in answer
                    ? answer.built.map((built, i) => answered(inputs[i]!, built))
                    : inputs.map((input) => answered(input, { defect: answer.defect })),
                ),
              ),
            )
            const question: Question = {
              id,
              inputs: inputs.map(({ p256dh, auth, payload }) => ({ p256dh, auth, payload })),
            }
            worker.postMessage(question)
            return Effect.sync(() => slot.waiting.delete(id))
          })
        const buildMany = (inputs: ReadonlyArray<PushRequest.PushRequestInput>) =>
          inputs.length === 0
            ? Effect.succeed([])
            : Effect.withSpan(
                Effect.map(
                  Effect.all(split(inputs, partsOf(inputs.length)).map(ask), { concurrency: "unbounded" }),
                  (parts) => parts.flat(),
                ),
                "PushEncryption.buildMany",
                { attributes: { messages: inputs.length } },
              )
        const build = (input: PushRequest.PushRequestInput) => Effect.flatMap(buildMany([input]), ([built]) => built!)
        return { build, buildMany }
      })
