/**
 * Real servers on 127.0.0.1 for the length of a test's scope, counting what reaches them, so a
 * test can prove that nothing did. Closing the scope drops every open connection, including
 * responses a handler holds forever.
 */
import { createServer as createHttpServer, type IncomingMessage, type ServerResponse } from "node:http"
import { createServer as createHttpsServer } from "node:https"
import type { AddressInfo } from "node:net"
import { createServer as createTcpServer, type Socket, type Server as TcpServer } from "node:net"
import { Effect } from "effect"
import * as SelfSignedCert from "./SelfSignedCert.ts"

export interface Received {
  readonly method: string
  readonly url: string
  readonly headers: IncomingMessage["headers"]
  readonly body: string
}

export interface LoopbackServer {
  readonly port: number
  /** `http://127.0.0.1:PORT` (or https for `https`). */
  readonly origin: string
  /** TCP connections accepted so far. */
  readonly connections: () => number
  /** Requests whose body arrived in full. */
  readonly received: () => ReadonlyArray<Received>
}

/** `body` is the request body as UTF-8; `bytes` as it arrived (an encrypted push message is binary). */
type Handler = (request: IncomingMessage, response: ServerResponse, body: string, bytes: Buffer) => void

const listening = <S extends TcpServer>(make: () => S, scheme: string, withBodies: boolean, handler: Handler) =>
  Effect.acquireRelease(
    Effect.callback<{ readonly server: S; readonly sockets: Set<Socket>; readonly state: LoopbackServer }>((resume) => {
      const server = make()
      let connections = 0
      const received: Array<Received> = []
      const sockets = new Set<Socket>()
      server.on("connection", (socket: Socket) => {
        connections++
        sockets.add(socket)
        socket.on("close", () => sockets.delete(socket))
      })
      if (withBodies) {
        server.on("request", (request: IncomingMessage, response: ServerResponse) => {
          const chunks: Array<Buffer> = []
          request.on("data", (chunk: Buffer) => chunks.push(chunk))
          request.on("end", () => {
            const bytes = Buffer.concat(chunks)
            const body = bytes.toString("utf8")
            received.push({ method: request.method ?? "", url: request.url ?? "", headers: request.headers, body })
            handler(request, response, body, bytes)
          })
        })
      }
      server.listen(0, "127.0.0.1", () => {
        const { port } = server.address() as AddressInfo
        resume(
          Effect.succeed({
            server,
            sockets,
            state: {
              port,
              origin: `${scheme}://127.0.0.1:${port}`,
              connections: () => connections,
              received: () => received,
            },
          }),
        )
      })
    }),
    ({ server, sockets }) =>
      Effect.callback<void>((resume) => {
        server.close(() => resume(Effect.void))
        for (const socket of sockets) socket.destroy()
      }),
  ).pipe(Effect.map(({ state }) => state))

/** An HTTP server; `handler` runs once the request body has arrived. */
export const http = (handler: Handler) => listening(() => createHttpServer(), "http", true, handler)

/** An HTTPS server with the self-signed certificate, which a client with default CAs refuses. */
export const httpsSelfSigned = (handler: Handler) =>
  listening(() => createHttpsServer({ key: SelfSignedCert.key, cert: SelfSignedCert.cert }), "https", true, handler)

/** A TCP server that accepts connections and never says anything (a TLS handshake never completes). */
export const silent = () =>
  listening(
    () => createTcpServer(),
    "https",
    false,
    () => {},
  )

/** A port on 127.0.0.1 that was free a moment ago and has nothing listening now. */
export const closedPort = listening(
  () => createTcpServer(),
  "http",
  false,
  () => {},
).pipe(
  Effect.map((server) => server.port),
  Effect.scoped,
)
