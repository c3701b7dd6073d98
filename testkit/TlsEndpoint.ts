/**
 * The push service fake's server when it speaks TLS, as push services do: HTTP/2 and HTTP/1.1 on
 * one port, chosen by ALPN, on 127.0.0.1 for the length of a scope, each request handed over once
 * its whole body has arrived (the shape `LoopbackEndpoint` hands over).
 *
 * What it keeps true:
 * - `counts` says how each request came: HTTP/2 sessions (connections) and the streams on them,
 *   and HTTP/1.1 requests, so a test can prove that many requests shared one connection.
 * - Closing the scope ends everything: held responses, sessions and connections, then the server.
 */
import {
  createSecureServer,
  type Http2ServerRequest,
  type Http2ServerResponse,
  type ServerHttp2Session,
} from "node:http2"
import type { AddressInfo, Socket } from "node:net"
import { Effect } from "effect"
import * as TestCertificate from "./TestCertificate.ts"

export interface Arrival {
  readonly request: Http2ServerRequest
  readonly response: Http2ServerResponse
  readonly path: string
  readonly body: Buffer
  readonly hold: () => void
}

export interface Counts {
  /** HTTP/2 connections accepted. */
  readonly sessions: number
  /** HTTP/2 requests, over all sessions. */
  readonly streams: number
  /** HTTP/1.1 requests. */
  readonly http1Requests: number
}

export interface TlsEndpoint {
  readonly port: number
  /** `https://127.0.0.1:PORT`. */
  readonly origin: string
  readonly counts: () => Counts
}

/** Runs `handle` for every request while the scope is open. */
export const listen = (handle: (arrival: Arrival) => void) =>
  Effect.gen(function* () {
    const held = new Set<Http2ServerResponse>()
    const sessions = new Set<ServerHttp2Session>()
    const sockets = new Set<Socket>()
    const counts = { sessions: 0, streams: 0, http1Requests: 0 }
    const server = createSecureServer(
      { key: TestCertificate.key, cert: TestCertificate.cert, allowHTTP1: true },
      (request, response) => {
        if (request.httpVersion === "2.0") counts.streams++
        else counts.http1Requests++
        const chunks: Array<Buffer> = []
        request.on("data", (chunk: Buffer) => chunks.push(chunk))
        request.on("end", () =>
          handle({
            request,
            response,
            path: request.url,
            body: Buffer.concat(chunks),
            hold: () => held.add(response),
          }),
        )
      },
    )
    server.on("session", (session: ServerHttp2Session) => {
      counts.sessions++
      sessions.add(session)
      session.on("close", () => sessions.delete(session))
    })
    server.on("secureConnection", (socket: Socket) => {
      sockets.add(socket)
      socket.on("close", () => sockets.delete(socket))
    })
    const port = yield* Effect.acquireRelease(
      Effect.callback<number>((resume) => {
        server.listen(0, "127.0.0.1", () => resume(Effect.succeed((server.address() as AddressInfo).port)))
      }),
      () =>
        Effect.callback<void>((resume) => {
          for (const response of held) response.stream?.destroy()
          held.clear()
          for (const session of sessions) session.destroy()
          for (const socket of sockets) socket.destroy()
          server.close(() => resume(Effect.void))
        }),
    )
    return { port, origin: `https://127.0.0.1:${port}`, counts: () => ({ ...counts }) } satisfies TlsEndpoint
  })
