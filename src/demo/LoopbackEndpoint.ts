/**
 * The HTTP server under the demo's receiver and push service, and (through `testkit/`) under every
 * receiver and push-service fake of the tests, benchmarks and chaos runs: one server on 127.0.0.1
 * for the length of a scope, each request handed over once its whole body has arrived.
 *
 * What it keeps true:
 * - A request is stamped when its headers arrive (Node's request callback), before its body is
 *   read: `arrivedAt` on the `performance.now()` clock a benchmark stamps commits with, `at` as
 *   epoch milliseconds.
 * - Closing the scope ends everything: responses a handler `hold`s (a hang) are cut, every
 *   connection is closed, then the server.
 * - A port asked for is used when it is free; otherwise any free port (the demo's receiver keeps
 *   its port across starts only when it can).
 *
 * It lives in `src/demo/` because `bothy start` runs the demo from the package, which holds only
 * `src/`; `testkit/` builds on it (src/ never imports testkit/).
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"
import { Effect } from "effect"

export interface Arrival {
  readonly request: IncomingMessage
  readonly response: ServerResponse
  /** The request's path and query (its `url`). */
  readonly path: string
  readonly body: Buffer
  /** `performance.now()` when the headers arrived. */
  readonly arrivedAt: number
  /** `Date.now()` when the headers arrived. */
  readonly at: number
  /** Leaves the response unanswered until the scope closes (a hang). */
  readonly hold: () => void
}

export interface LoopbackEndpoint {
  readonly port: number
  /** `http://127.0.0.1:PORT`. */
  readonly origin: string
}

export interface Options {
  /** The port to use when it is free (else any). */
  readonly port?: number
  /** How long an idle keep-alive connection stays open (Node's default otherwise). */
  readonly keepAliveTimeout?: number
}

const listenOn = (server: Server, port: number) =>
  Effect.callback<number, Error>((resume) => {
    const failed = (error: Error) => resume(Effect.fail(error))
    server.once("error", failed)
    server.listen(port, "127.0.0.1", () => {
      server.off("error", failed)
      resume(Effect.succeed((server.address() as AddressInfo).port))
    })
  })

/** Runs `handle` for every request while the scope is open. */
export const listen = (handle: (arrival: Arrival) => void, options: Options = {}) =>
  Effect.gen(function* () {
    const held = new Set<ServerResponse>()
    const server = createServer((request, response) => {
      const arrivedAt = performance.now()
      const at = Date.now()
      const chunks: Array<Buffer> = []
      request.on("data", (chunk: Buffer) => chunks.push(chunk))
      request.on("end", () =>
        handle({
          request,
          response,
          path: request.url ?? "/",
          body: Buffer.concat(chunks),
          arrivedAt,
          at,
          hold: () => held.add(response),
        }),
      )
    })
    if (options.keepAliveTimeout !== undefined) server.keepAliveTimeout = options.keepAliveTimeout
    const port = yield* Effect.acquireRelease(
      listenOn(server, options.port ?? 0).pipe(
        Effect.catch(() => listenOn(server, 0)),
        Effect.orDie,
      ),
      () =>
        Effect.callback<void>((resume) => {
          for (const response of held) response.destroy()
          held.clear()
          server.closeAllConnections()
          server.close(() => resume(Effect.void))
        }),
    )
    return { port, origin: `http://127.0.0.1:${port}` } satisfies LoopbackEndpoint
  })
