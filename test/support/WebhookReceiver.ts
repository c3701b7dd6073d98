/**
 * A webhook endpoint for tests: a `LoopbackServer.http` that answers with what the test decides,
 * keeps every request with the status it got, and puts each on a queue the test can wait on.
 */
import { Effect, Queue } from "effect"
import * as LoopbackServer from "./LoopbackServer.ts"

export interface Received extends LoopbackServer.Received {
  /** The request's path (its `url`). */
  readonly path: string
  /** The status this receiver answered with. */
  readonly status: number
}

export interface Answer {
  readonly status: number
  readonly headers?: Record<string, string>
  /** Never answer: the request hangs until the sender gives up or the receiver closes. */
  readonly hang?: boolean
  /** Answer once this settles: a slow endpoint. */
  readonly after?: Promise<unknown>
}

export const start = (answer: (request: { readonly path: string; readonly body: string }) => Answer) =>
  Effect.gen(function* () {
    const received = yield* Queue.unbounded<Received>()
    const log: Array<Received> = []
    const server = yield* LoopbackServer.http((request, response, body) => {
      const path = request.url ?? "/"
      const a = answer({ path, body })
      const entry: Received = {
        method: request.method ?? "",
        url: path,
        path,
        headers: request.headers,
        body,
        status: a.status,
      }
      log.push(entry)
      Queue.offerUnsafe(received, entry)
      const reply = () => response.writeHead(a.status, a.headers ?? {}).end("ok")
      if (a.hang === true) return
      if (a.after === undefined) reply()
      else void a.after.then(reply, reply)
    })
    return { url: (path: string) => `${server.origin}${path}`, received, log }
  })
