/**
 * The HTTP/2 connections native push sends on: one per origin (an APNs environment, Google's OAuth
 * endpoint, FCM), every request a stream on it, as Apple asks ("keep your connections open") and
 * Google allows. The origins are the operator's configuration, never a registration's, so no
 * outbound target policy applies here (a device token chooses a path on a fixed host).
 *
 * What it keeps true:
 * - At most one live session per origin; a session that closes, errs or gets a GOAWAY is dropped,
 *   and the next request dials a new one.
 * - A request ends within `timeout` with an answer or a `NativeTransportError`; its response body
 *   is read up to `maxResponseBytes` (the providers answer in a few hundred bytes).
 * - Closing the scope closes every session.
 */
import { type ClientHttp2Session, connect, constants } from "node:http2"
import { Duration, Effect, Schema } from "effect"

export class NativeTransportError extends Schema.TaggedError<NativeTransportError>()("NativeTransportError", {
  origin: Schema.String,
  reason: Schema.String,
}) {
  override get message() {
    return `no answer from ${this.origin}: ${this.reason}`
  }
}

export interface Answer {
  readonly status: number
  readonly headers: Readonly<Record<string, string | undefined>>
  readonly body: string
}

export interface Request {
  readonly method: "POST"
  readonly path: string
  readonly headers: Readonly<Record<string, string>>
  readonly body: string
}

export interface NativeHttp2 {
  readonly request: (origin: string, request: Request) => Effect.Effect<Answer, NativeTransportError>
  /** Sessions dialed so far, by origin (what the one-connection checks count). */
  readonly dialed: () => ReadonlyMap<string, number>
}

export const maxResponseBytes = 16 * 1024

/** Connections for the scope's lifetime; `ca` adds trusted certificates (tests' fakes only). */
export const make = (options: { readonly ca?: ReadonlyArray<string>; readonly timeout?: Duration.Input } = {}) =>
  Effect.gen(function* () {
    const sessions = new Map<string, ClientHttp2Session>()
    const dialed = new Map<string, number>()
    const timeout = Duration.toMillis(Duration.fromInputUnsafe(options.timeout ?? "10 seconds"))
    yield* Effect.addFinalizer(() =>
      Effect.sync(() => {
        for (const session of sessions.values()) session.destroy()
        sessions.clear()
      }),
    )

    const sessionOf = (origin: string) => {
      const live = sessions.get(origin)
      if (live !== undefined && !live.closed && !live.destroyed) return live
      const session = connect(origin, options.ca === undefined ? {} : { ca: [...options.ca] })
      dialed.set(origin, (dialed.get(origin) ?? 0) + 1)
      const drop = () => {
        if (sessions.get(origin) === session) sessions.delete(origin)
      }
      session.on("close", drop)
      session.on("goaway", drop)
      session.on("error", drop)
      // An idle session must not keep the process alive; streams ref it while they run.
      session.unref()
      sessions.set(origin, session)
      return session
    }

    const request = (origin: string, req: Request) =>
      Effect.callback<Answer, NativeTransportError>((resume) => {
        const fail = (reason: string) => resume(Effect.fail(new NativeTransportError({ origin, reason })))
        let stream: ReturnType<ClientHttp2Session["request"]>
        try {
          stream = sessionOf(origin).request({
            [constants.HTTP2_HEADER_METHOD]: req.method,
            [constants.HTTP2_HEADER_PATH]: req.path,
            ...req.headers,
          })
        } catch (error) {
          return fail(error instanceof Error ? error.message : String(error))
        }
        stream.setTimeout(timeout, () => {
          stream.close(constants.NGHTTP2_CANCEL)
          fail(`no answer within ${timeout} ms`)
        })
        let status = 0
        let headers: Record<string, string | undefined> = {}
        const chunks: Array<Buffer> = []
        let size = 0
        stream.on("response", (h) => {
          status = Number(h[constants.HTTP2_HEADER_STATUS])
          headers = Object.fromEntries(Object.entries(h).map(([k, v]) => [k, Array.isArray(v) ? v.join(", ") : v]))
        })
        stream.on("data", (chunk: Buffer) => {
          size += chunk.length
          if (size <= maxResponseBytes) chunks.push(chunk)
        })
        stream.on("end", () =>
          resume(Effect.succeed({ status, headers, body: Buffer.concat(chunks).toString("utf8") })),
        )
        stream.on("error", (error) => fail(error.message))
        stream.end(req.body)
        return Effect.sync(() => {
          if (!stream.closed) stream.close(constants.NGHTTP2_CANCEL)
        })
      })

    return { request, dialed: () => new Map(dialed) } satisfies NativeHttp2
  })
