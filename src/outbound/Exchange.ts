/**
 * One POST and its answer over undici's `dispatch`, read straight into a capped buffer.
 *
 * `Agent.request` wraps the same call in a promise, a `Readable` body and an async iterator over
 * it: for the small answers webhook endpoints and push services give, that wrapping cost more CPU
 * than the request's own parsing and writing (about 60 against 40 µs a request, measured on one
 * keep-alive connection). Every delivery and push comes through here, so the handler is written
 * out instead.
 *
 * The caller gets exactly one `done`, and an `abort` that ends the exchange early (its reason is
 * what `done` then carries as the error, unless an answer was already whole). A request still
 * waiting for a socket ends at once on `abort`, and is aborted as soon as undici starts it.
 */
import type { Agent, Dispatcher } from "undici"

export interface Answer {
  readonly status: number
  /** At most `maxBytes + 4` bytes of the body: enough to see whether byte `maxBytes` ends a character. */
  readonly bytes: Uint8Array
  readonly retryAfter: string | undefined
}

export type Ended = { readonly answer: Answer } | { readonly error: unknown }

const headerText = (value: string | ReadonlyArray<string> | undefined): string | undefined =>
  typeof value === "string" ? value : value === undefined ? undefined : value.join(", ")

/** The abort reason when the body passed its cap: the connection is dropped, not drained. */
class AnswerCapped extends Error {}

/**
 * Sends `body` to `origin` + `path` and calls `done` once: with the answer when its body ended or
 * passed `maxBytes` (then the connection is dropped), or with the error that ended it.
 */
export const post = (
  agent: Agent,
  target: { readonly origin: string; readonly path: string },
  request: { readonly headers: Record<string, string>; readonly body: string | Uint8Array },
  maxBytes: number,
  done: (ended: Ended) => void,
): ((reason: Error) => void) => {
  let settled = false
  let controller: Dispatcher.DispatchController | undefined
  let abortedWith: Error | undefined
  let status = 0
  let retryAfter: string | undefined
  const chunks: Array<Buffer> = []
  let size = 0
  const settle = (ended: Ended) => {
    if (settled) return
    settled = true
    done(ended)
  }
  const answer = () =>
    settle({ answer: { status, bytes: Buffer.concat(chunks, Math.min(size, maxBytes + 4)), retryAfter } })
  const handler: Dispatcher.DispatchHandler = {
    onRequestStart(c) {
      controller = c
      if (abortedWith !== undefined) c.abort(abortedWith)
    },
    onResponseStart(_c, statusCode, headers) {
      // A 1xx comes before the answer, which starts again.
      status = statusCode
      retryAfter = headerText(headers["retry-after"])
    },
    onResponseData(c, chunk) {
      chunks.push(chunk)
      size += chunk.length
      if (size > maxBytes + 3) {
        answer()
        c.abort(new AnswerCapped())
      }
    },
    onResponseEnd: answer,
    onResponseError(_c, error) {
      settle({ error })
    },
  }
  try {
    agent.dispatch(
      { origin: target.origin, path: target.path, method: "POST", headers: request.headers, body: request.body },
      handler,
    )
  } catch (error) {
    settle({ error })
  }
  return (reason) => {
    if (settled) return
    abortedWith = reason
    if (controller !== undefined) controller.abort(reason)
    else settle({ error: reason })
  }
}
