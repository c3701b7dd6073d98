/**
 * Local servers for the endpoint authentication tests, on 127.0.0.1 for the length of a scope:
 * an OAuth2 token server that counts its requests, and an HTTPS endpoint with a certificate of a
 * private CA that may require a client certificate, recording what each request presented.
 * Certificates are made at test time with `openssl` (`TestCa`) in a folder removed with the scope.
 */
import { createHash } from "node:crypto"
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs"
import { createServer as createHttpServer, type IncomingMessage, type ServerResponse } from "node:http"
import { createServer as createHttpsServer } from "node:https"
import type { AddressInfo, Server } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import type { TLSSocket } from "node:tls"
import { Effect } from "effect"
import * as TestCa from "./TestCa.ts"

const listening = (server: Server) =>
  Effect.acquireRelease(
    Effect.callback<number>((resume) => {
      server.listen(0, "127.0.0.1", () => resume(Effect.succeed((server.address() as AddressInfo).port)))
    }),
    () =>
      Effect.callback<void>((resume) => {
        ;(server as Server & { closeAllConnections?: () => void }).closeAllConnections?.()
        server.close(() => resume(Effect.void))
      }),
  )

const bodyOf = (request: IncomingMessage) =>
  new Promise<string>((resolve) => {
    const chunks: Array<Buffer> = []
    request.on("data", (chunk: Buffer) => chunks.push(chunk))
    request.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")))
  })

export interface TokenRequest {
  readonly authorization: string | undefined
  readonly body: string
}

/**
 * A token server: each request gets `tok-N` (N counts from 1), valid `expiresIn` seconds, unless
 * `answer` says otherwise. `requests` lists what arrived.
 */
export const tokenServer = (
  expiresIn: number,
  answer?: (n: number, request: TokenRequest) => { readonly status: number; readonly body: string } | undefined,
) =>
  Effect.gen(function* () {
    const requests: Array<TokenRequest> = []
    const server = createHttpServer((request: IncomingMessage, response: ServerResponse) => {
      void bodyOf(request).then((body) => {
        const seen = { authorization: request.headers.authorization, body }
        requests.push(seen)
        const given = answer?.(requests.length, seen)
        const reply = given ?? {
          status: 200,
          body: JSON.stringify({ access_token: `tok-${requests.length}`, token_type: "Bearer", expires_in: expiresIn }),
        }
        response.writeHead(reply.status, { "content-type": "application/json" }).end(reply.body)
      })
    })
    const port = yield* listening(server)
    return { url: `http://127.0.0.1:${port}/token`, requests }
  })

export interface Pki {
  /** The CA that signed the server's certificate (PEM). */
  readonly serverCa: string
  readonly server: { readonly cert: string; readonly key: string }
  /** The CA the server trusts for client certificates, and two client identities it signed. */
  readonly clientCa: string
  readonly clientA: { readonly cert: string; readonly key: string }
  readonly clientB: { readonly cert: string; readonly key: string }
  /** A CA that signed nothing here. */
  readonly otherCa: string
}

/** Fresh CAs and certificates for one test, made with `openssl`. */
export const pki = Effect.acquireRelease(
  Effect.sync(() => {
    const dir = mkdtempSync(join(tmpdir(), "bothy-endpoint-pki-"))
    const read = (files: { readonly cert: string; readonly key: string }) => ({
      cert: readFileSync(files.cert, "utf8"),
      key: readFileSync(files.key, "utf8"),
    })
    const signed = (name: string, ca: { readonly cert: string; readonly key: string }) => {
      mkdirSync(join(dir, name))
      return read(TestCa.makeServerCert(join(dir, name), ca, undefined))
    }
    const serverCa = TestCa.makeCa(dir, "server-ca")
    const clientCa = TestCa.makeCa(dir, "client-ca")
    const pki: Pki = {
      serverCa: readFileSync(serverCa.cert, "utf8"),
      server: signed("server", serverCa),
      clientCa: readFileSync(clientCa.cert, "utf8"),
      clientA: signed("client-a", clientCa),
      clientB: signed("client-b", clientCa),
      otherCa: readFileSync(TestCa.makeCa(dir, "other-ca").cert, "utf8"),
    }
    return { dir, pki }
  }),
  ({ dir }) => Effect.sync(() => rmSync(dir, { recursive: true, force: true })),
).pipe(Effect.map(({ pki }) => pki))

/** The SHA-256 fingerprint of a PEM certificate, as `getPeerCertificate().fingerprint256` spells it. */
export const fingerprint = (pem: string) => {
  const der = Buffer.from(pem.replace(/-----[^-]+-----/g, "").replace(/\s+/g, ""), "base64")
  return createHash("sha256").update(der).digest("hex").toUpperCase().match(/.{2}/g)!.join(":")
}

export interface Arrival {
  readonly path: string
  /** The fingerprint of the client certificate presented, if any. */
  readonly client: string | undefined
}

/**
 * An HTTPS endpoint with `pki.server`'s certificate answering 200. With `requireClient`, the
 * handshake fails without a client certificate signed by `pki.clientCa`.
 */
export const tlsEndpoint = (pki: Pki, requireClient: boolean) =>
  Effect.gen(function* () {
    const arrivals: Array<Arrival> = []
    const server = createHttpsServer(
      {
        cert: pki.server.cert,
        key: pki.server.key,
        ...(requireClient ? { ca: pki.clientCa, requestCert: true, rejectUnauthorized: true } : {}),
      },
      (request, response) => {
        void bodyOf(request).then(() => {
          const peer = (request.socket as TLSSocket).getPeerCertificate()
          arrivals.push({ path: request.url ?? "", client: peer?.fingerprint256 })
          response.writeHead(200).end("ok")
        })
      },
    )
    const port = yield* listening(server)
    return { url: (path: string) => `https://127.0.0.1:${port}${path}`, arrivals }
  })
