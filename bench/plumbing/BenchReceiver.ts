/**
 * The webhook endpoint of a benchmark: one `node:http` server on 127.0.0.1 in the benchmark's own
 * process, answering 200 to every request as soon as its body is read, so the figure measures
 * bothy and not the receiver.
 *
 * Each request is stamped with `performance.now()` when its headers arrive (Node's request
 * callback), the same clock the producer stamps commits with; the body is read after that and
 * handed over with the stamp. Closing the scope closes every connection and the server.
 */
import { createServer } from "node:http"
import type { AddressInfo } from "node:net"
import { Effect } from "effect"

export interface Arrival {
  readonly path: string
  readonly body: string
  /** `performance.now()` when the request's headers arrived. */
  readonly arrivedAt: number
}

export const start = (onRequest: (arrival: Arrival) => void) =>
  Effect.gen(function* () {
    const server = yield* Effect.acquireRelease(
      Effect.callback<ReturnType<typeof createServer>>((resume) => {
        const s = createServer((req, res) => {
          const arrivedAt = performance.now()
          const chunks: Array<Buffer> = []
          req.on("data", (c: Buffer) => chunks.push(c))
          req.on("end", () => {
            res.writeHead(200, { "content-type": "text/plain" }).end("ok")
            onRequest({ path: req.url ?? "/", body: Buffer.concat(chunks).toString("utf8"), arrivedAt })
          })
        })
        s.once("error", (e) => resume(Effect.die(e)))
        s.listen(0, "127.0.0.1", () => resume(Effect.succeed(s)))
      }),
      (s) =>
        Effect.callback<void>((resume) => {
          s.closeAllConnections()
          s.close(() => resume(Effect.void))
        }),
    )
    const { port } = server.address() as AddressInfo
    return { url: (path: string) => `http://127.0.0.1:${port}${path}` }
  })
