/**
 * The admin server on a port-0 loopback socket for tests (`serve`: its URL, once it listens), and
 * a plain HTTP client for it (`call`: fetch, JSON in and out, the status as the server sent it),
 * so the tests see the wire as any client would: ids and seqs as strings, errors as JSON bodies.
 */
import { Deferred, Effect, Layer, Option } from "effect"
import { AdminAuth, type AdminAuthShape } from "../../src/admin/AdminAuth.ts"
import * as AdminServer from "../../src/admin/AdminServer.ts"

/** Serves the admin API with `auth` on 127.0.0.1:0 for the rest of the scope; its base URL. */
export const serve = (
  auth: AdminAuthShape,
  address = { host: "127.0.0.1", port: 0 },
  options: AdminServer.RoutesOptions = {},
) =>
  Effect.gen(function* () {
    const served = yield* Deferred.make<string>()
    yield* Layer.build(
      AdminServer.layer(Option.some(address), {
        ...options,
        onServed: (url) => Deferred.succeed(served, url).pipe(Effect.asVoid),
      }).pipe(Layer.provide(Layer.succeed(AdminAuth, auth))),
    )
    return yield* Deferred.await(served)
  })

export interface Answer {
  readonly status: number
  /** The parsed JSON (or the text): a test reads it as the wire shape it expects. */
  // biome-ignore lint/suspicious/noExplicitAny: the tests assert on the wire's shapes field by field
  readonly body: any
  readonly headers: Headers
}

/** One request; `token` goes as a bearer token, `headers` as they are. */
export const call = (
  base: string,
  method: string,
  path: string,
  options: { readonly body?: unknown; readonly token?: string; readonly headers?: Record<string, string> } = {},
) =>
  Effect.promise(async (): Promise<Answer> => {
    const response = await fetch(`${base}${path}`, {
      method,
      headers: {
        ...(options.body === undefined ? {} : { "content-type": "application/json" }),
        ...(options.token === undefined ? {} : { authorization: `Bearer ${options.token}` }),
        ...options.headers,
      },
      ...(options.body === undefined ? {} : { body: JSON.stringify(options.body) }),
    })
    const text = await response.text()
    const type = response.headers.get("content-type") ?? ""
    return {
      status: response.status,
      body: text !== "" && type.includes("json") ? JSON.parse(text) : text,
      headers: response.headers,
    }
  })

/** `call` bound to one server and caller: a bearer `token`, or a host's own `headers`. */
export const client = (
  base: string,
  auth: { readonly token?: string; readonly headers?: Record<string, string> } = {},
) => {
  const as = (method: string) => (path: string, body?: unknown) =>
    call(base, method, path, { ...auth, ...(body === undefined ? {} : { body }) })
  return { get: as("GET"), post: as("POST"), patch: as("PATCH"), delete: as("DELETE") }
}

/** A client of the admin API a `bothy worker` child serves (from its start line), with `token`. */
export const clientOf = (worker: { readonly waitFor: (pattern: RegExp) => Effect.Effect<string> }, token: string) =>
  Effect.map(worker.waitFor(/admin API served on /), (line) =>
    client(/admin API served on (http:\/\/[^\s"]+)/.exec(line)![1]!, { token }),
  )
