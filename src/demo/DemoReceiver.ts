/**
 * The demo's webhook receiver on loopback: one path per subscription (`/hooks/<name>`, a name the demo gives it), each request
 * verified with the public `standardwebhooks` package against that subscription's secret, as a
 * receiver's team would verify it. A verified request is answered 204 and counted as a delivery
 * done; one that does not verify is answered 401 and counted as a failure (bothy retries it).
 *
 * It starts with what an earlier start kept (`DemoSetup.kept`): the port, when it is free, so the
 * subscriptions kept in the database still reach it, and their secrets.
 */
import { createServer, type IncomingMessage, type Server } from "node:http"
import type { AddressInfo } from "node:net"
import { Effect, Redacted } from "effect"
import { Webhook } from "standardwebhooks"
import type { DemoCounts } from "./DemoCounts.ts"

export interface DemoReceiver {
  readonly port: number
  /** The URL a subscription posts to. */
  readonly url: (name: string) => string
  /** From now on, requests for `name` are verified with `secret`. */
  readonly accept: (name: string, secret: Redacted.Redacted<string>) => void
  /** The secrets it verifies with, by name. */
  readonly secrets: () => ReadonlyMap<string, Redacted.Redacted<string>>
}

/** What the receiver kept of an earlier start. */
export interface Kept {
  readonly receiverPort: number | undefined
  /** Signing secrets by subscription name. */
  readonly secrets: ReadonlyMap<string, Redacted.Redacted<string>>
}

const prefix = "/hooks/"

const bodyOf = (request: IncomingMessage) =>
  new Promise<string>((resolve, reject) => {
    const chunks: Array<Buffer> = []
    request.on("data", (chunk: Buffer) => chunks.push(chunk))
    request.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")))
    request.on("error", reject)
  })

const headersOf = (request: IncomingMessage): Record<string, string> =>
  Object.fromEntries(Object.entries(request.headers).map(([k, v]) => [k, Array.isArray(v) ? v.join(", ") : (v ?? "")]))

const listen = (server: Server, port: number) =>
  Effect.callback<number, Error>((resume) => {
    const failed = (error: Error) => resume(Effect.fail(error))
    server.once("error", failed)
    server.listen(port, "127.0.0.1", () => {
      server.off("error", failed)
      resume(Effect.succeed((server.address() as AddressInfo).port))
    })
  })

/** Starts the receiver for the scope, on the kept port if it is free, else on any. */
export const start = (counts: DemoCounts, kept: Kept) =>
  Effect.gen(function* () {
    const secrets = new Map(kept.secrets)
    const verifiers = new Map([...secrets].map(([name, secret]) => [name, new Webhook(Redacted.value(secret))]))
    const server = createServer((request, response) => {
      void bodyOf(request).then(
        (body) => {
          const id = (request.url ?? "").startsWith(prefix) ? (request.url ?? "").slice(prefix.length) : ""
          const verifier = verifiers.get(id)
          try {
            if (verifier === undefined) throw new Error("no such subscription")
            verifier.verify(body, headersOf(request))
            counts.verified++
            response.writeHead(204).end()
          } catch {
            counts.webhookFailures++
            response.writeHead(401).end()
          }
        },
        () => response.writeHead(400).end(),
      )
    })
    const port = yield* Effect.acquireRelease(
      listen(server, kept.receiverPort ?? 0).pipe(
        Effect.catch(() => listen(server, 0)),
        Effect.orDie,
      ),
      () =>
        Effect.callback<void>((resume) => {
          server.close(() => resume(Effect.void))
          server.closeAllConnections()
        }),
    )
    return {
      port,
      url: (id) => `http://127.0.0.1:${port}${prefix}${id}`,
      accept: (name, secret) => {
        secrets.set(name, secret)
        verifiers.set(name, new Webhook(Redacted.value(secret)))
      },
      secrets: () => secrets,
    } satisfies DemoReceiver
  })
