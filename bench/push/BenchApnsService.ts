/**
 * The APNs fake of `npm run bench -- push`'s APNs part, on a thread of its own so that its CPU is
 * not the sender's: HTTP/2 over TLS on 127.0.0.1 (the test certificate), `POST /3/device/<token>`
 * answered 200. It checks what APNs checks: every provider token's ES256 signature with the
 * key's public half, its `kid`, `iss` and an `iat` at most an hour old, once per distinct token
 * (as APNs validates a token once per connection, not per request); a request with a token that
 * fails is refused 403 and counted.
 *
 * The main thread asks for its counts (sessions, accepted, refused) and the CPU its thread used.
 */
import { verify } from "node:crypto"
import { createSecureServer } from "node:http2"
import type { AddressInfo } from "node:net"
import { isMainThread, type MessagePort, parentPort, Worker, workerData } from "node:worker_threads"
import { Effect } from "effect"
import * as TestCertificate from "../../testkit/TestCertificate.ts"

interface ThreadInput {
  readonly publicKey: string
  readonly keyId: string
  readonly teamId: string
}

export interface Counts {
  readonly sessions: number
  readonly accepted: number
  readonly refused: number
  /** CPU time the thread has used so far, µs. */
  readonly cpuMicros: number
}

type FromThread = { readonly ready: string } | { readonly counts: Counts }

/** Starts the fake for the length of the scope, verifying with `input.publicKey` (PEM). */
export const start = (input: ThreadInput) =>
  Effect.gen(function* () {
    const worker = yield* Effect.acquireRelease(
      Effect.sync(() => new Worker(new URL(import.meta.url), { workerData: input })),
      (w) => Effect.promise(() => w.terminate()),
    )
    const next = <A>(pick: (m: FromThread) => A | undefined, ask?: string) =>
      Effect.callback<A>((resume) => {
        const on = (m: FromThread) => {
          const value = pick(m)
          if (value === undefined) return
          worker.off("message", on)
          resume(Effect.succeed(value))
        }
        worker.on("message", on)
        if (ask !== undefined) worker.postMessage(ask)
      })
    const origin = yield* next((m) => ("ready" in m ? m.ready : undefined))
    return { origin, counts: next((m) => ("counts" in m ? m.counts : undefined), "counts") }
  })

export type BenchApnsService = Effect.Success<ReturnType<typeof start>>

const claims = (part: string) => JSON.parse(Buffer.from(part, "base64url").toString("utf8")) as Record<string, unknown>

const runThread = (input: ThreadInput, port: MessagePort) => {
  const verified = new Map<string, boolean>()
  const counts = { sessions: 0, accepted: 0, refused: 0 }
  const valid = (authorization: string | undefined) => {
    const jwt = /^bearer (.+)$/.exec(authorization ?? "")?.[1]
    if (jwt === undefined) return false
    const known = verified.get(jwt)
    if (known !== undefined) return known
    const [h, c, s] = jwt.split(".")
    let ok = false
    try {
      const header = claims(h!)
      const body = claims(c!)
      const now = Date.now() / 1000
      ok =
        verify(
          "sha256",
          Buffer.from(`${h}.${c}`),
          { key: input.publicKey, dsaEncoding: "ieee-p1363" },
          Buffer.from(s!, "base64url"),
        ) &&
        header.alg === "ES256" &&
        header.kid === input.keyId &&
        body.iss === input.teamId &&
        typeof body.iat === "number" &&
        now - body.iat < 3600
    } catch {
      ok = false
    }
    verified.set(jwt, ok)
    return ok
  }
  const server = createSecureServer({ key: TestCertificate.key, cert: TestCertificate.cert })
  server.on("session", () => counts.sessions++)
  server.on("stream", (stream, headers) => {
    stream.resume()
    stream.on("end", () => {
      const ok = /^\/3\/device\/[0-9a-f]+$/.test(String(headers[":path"])) && valid(headers.authorization)
      if (ok) counts.accepted++
      else counts.refused++
      stream.respond({ ":status": ok ? 200 : 403 })
      stream.end(ok ? undefined : '{"reason":"InvalidProviderToken"}')
    })
  })
  port.on("message", () => {
    const used = process.threadCpuUsage()
    port.postMessage({ counts: { ...counts, cpuMicros: used.user + used.system } } satisfies FromThread)
  })
  server.listen(0, "127.0.0.1", () => {
    port.postMessage({ ready: `https://127.0.0.1:${(server.address() as AddressInfo).port}` } satisfies FromThread)
  })
}

if (!isMainThread && parentPort !== null) runThread(workerData as ThreadInput, parentPort)
