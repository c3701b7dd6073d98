/**
 * Where one of bothy's HTTP endpoints listens (`metrics.address`, `admin.address`): `host:port`,
 * `[v6]:port`, or `off` for none; port 0 takes any free one. Parsed the same way for every
 * endpoint, so each setting refuses the same mistakes with the same words; and served the same
 * way (`serve`): one start line naming the URL, and an address that cannot be had (taken, not this
 * machine's) as the endpoint's own error naming its setting.
 */
import { createServer } from "node:http"
import { NodeHttpServer } from "@effect/platform-node"
import { Cause, Effect, Layer, Option, Result } from "effect"
import { HttpRouter, HttpServer } from "effect/http"

/** Where an endpoint listens; `None`: it is off. */
export type ListenAddress = Option.Option<{ readonly host: string; readonly port: number }>

/** `host:port`, `[v6]:port`, or `off`; `example` is the setting's default, named in the refusal. */
export const parse = (raw: string, example: string): Result.Result<ListenAddress, string> => {
  const text = raw.trim()
  if (text.toLowerCase() === "off") return Result.succeed(Option.none())
  const match = /^(?:\[([0-9a-fA-F:.]+)\]|([^:[\]\s]+)):(\d{1,5})$/.exec(text)
  const port = Number(match?.[3])
  if (match === null || !Number.isInteger(port) || port > 65535) {
    const other = example.replace(/^[^:]+:/, "")
    return Result.fail(`expected host:port (e.g. ${example}, [::1]:${other}, 0.0.0.0:${other}) or off`)
  }
  return Result.succeed(Option.some({ host: match[1] ?? match[2]!, port }))
}

/** `host:port` as a person writes it (IPv6 in brackets). */
export const format = ({ host, port }: { readonly host: string; readonly port: number }) =>
  host.includes(":") ? `[${host}]:${port}` : `${host}:${port}`

/** Reachable from this machine only: `localhost`, 127.0.0.0/8 or ::1. */
export const isLoopback = (host: string): boolean =>
  host === "localhost" || /^127(\.\d{1,3}){3}$/.test(host) || /^(0{0,4}:){2,7}0{0,3}1$/.test(host) || host === "::1"

/** The socket's own words (`listen EADDRINUSE ...`), under the server's wrapper. */
export const reasonOf = (error: unknown): string =>
  error instanceof Error ? (error.cause instanceof Error ? error.cause.message : error.message) : String(error)

/**
 * Serves `routes` on `address` for the layer's lifetime (nothing when it is off): `announce` hears
 * the bound URL (port 0 resolved); a listen that fails is `unavailable(address, reason)`.
 */
export const serve = <E, R>(
  address: ListenAddress,
  routes: Layer.Layer<never, never, R>,
  options: {
    readonly announce: (url: string) => Effect.Effect<void>
    readonly unavailable: (address: string, reason: string) => E
  },
) =>
  Option.match(address, {
    onNone: () => Layer.empty,
    onSome: ({ host, port }) =>
      Layer.merge(
        HttpRouter.serve(routes, { disableLogger: true, disableListenLog: true }),
        Layer.effectDiscard(HttpServer.addressFormattedWith(options.announce)),
      ).pipe(
        Layer.provide(NodeHttpServer.layer(createServer, { host, port })),
        Layer.catchCause((cause) =>
          Layer.effectDiscard(Effect.fail(options.unavailable(format({ host, port }), reasonOf(Cause.squash(cause))))),
        ),
      ),
  })
