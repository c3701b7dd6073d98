/**
 * The HTTP server under both receivers of a chaos run: 127.0.0.1, a free port, each request handed
 * over with its whole body and the time it arrived. A response the handler `hold`s (a hang) gets no
 * answer; when the scope closes, those are cut and every connection closed.
 */
import { createServer, type IncomingMessage, type ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"
import { Effect } from "effect"

export type Handler = (
  request: IncomingMessage,
  response: ServerResponse,
  body: Buffer,
  at: number,
  hold: (response: ServerResponse) => void,
) => void

/** `http://127.0.0.1:PORT` of a server running `handle` for the length of the scope. */
export const listen = (handle: Handler) =>
  Effect.gen(function* () {
    const held: Array<ServerResponse> = []
    const hold = (response: ServerResponse) => held.push(response)
    const server = yield* Effect.acquireRelease(
      Effect.callback<ReturnType<typeof createServer>>((resume) => {
        const s = createServer((request, response) => {
          const at = Date.now()
          const chunks: Array<Buffer> = []
          request.on("data", (c: Buffer) => chunks.push(c))
          request.on("end", () => handle(request, response, Buffer.concat(chunks), at, hold))
        })
        s.keepAliveTimeout = 30_000
        s.once("error", (e) => resume(Effect.die(e)))
        s.listen(0, "127.0.0.1", () => resume(Effect.succeed(s)))
      }),
      (s) =>
        Effect.callback<void>((resume) => {
          for (const r of held.splice(0)) r.destroy()
          s.closeAllConnections()
          s.close(() => resume(Effect.void))
        }),
    )
    return `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  })
