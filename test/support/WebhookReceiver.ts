/**
 * A real HTTP receiver on loopback for webhook tests: records every request and answers with what
 * the test decides; each request also arrives on a queue the test can wait on.
 */
import { createServer, type IncomingHttpHeaders } from "node:http"
import type { AddressInfo } from "node:net"
import { Effect, Queue } from "effect"

export interface Received {
  readonly path: string
  readonly headers: IncomingHttpHeaders
  readonly body: string
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
    const server = yield* Effect.acquireRelease(
      Effect.callback<ReturnType<typeof createServer>>((resume) => {
        const s = createServer((req, res) => {
          const chunks: Array<Buffer> = []
          req.on("data", (c: Buffer) => chunks.push(c))
          req.on("end", () => {
            const body = Buffer.concat(chunks).toString("utf8")
            const path = req.url ?? "/"
            const a = answer({ path, body })
            const entry = { path, headers: req.headers, body, status: a.status }
            log.push(entry)
            Queue.offerUnsafe(received, entry)
            const reply = () => res.writeHead(a.status, a.headers ?? {}).end("ok")
            if (a.hang === true) return
            if (a.after === undefined) reply()
            else void a.after.then(reply, reply)
          })
        })
        s.listen(0, "127.0.0.1", () => resume(Effect.succeed(s)))
      }),
      (s) =>
        Effect.callback<void>((resume) => {
          s.closeAllConnections()
          s.close(() => resume(Effect.void))
        }),
    )
    const { port } = server.address() as AddressInfo
    return { url: (path: string) => `http://127.0.0.1:${port}${path}`, received, log }
  })
