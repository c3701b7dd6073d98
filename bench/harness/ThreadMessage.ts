/**
 * The next message a benchmark's worker thread posts, or the error it dies of: how the main
 * thread waits on its producer and receiver threads.
 */
import type { Worker } from "node:worker_threads"
import { Effect } from "effect"

export const next = <A>(worker: Worker) =>
  Effect.callback<A, Error>((resume) => {
    const onMessage = (m: A) => {
      worker.off("error", onError)
      resume(Effect.succeed(m))
    }
    const onError = (e: Error) => {
      worker.off("message", onMessage)
      resume(Effect.fail(e))
    }
    worker.once("message", onMessage)
    worker.once("error", onError)
  })
