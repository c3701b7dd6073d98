/**
 * Several hosts in `DATABASE_URL`, as libpq takes them
 * (`postgres://u:p@db1:5432,db2:5432/app?target_session_attrs=read-write`), for a primary and its
 * standbys: the driver (`@effect/sql-pg`) connects to one host only and ignores
 * `target_session_attrs`, so bothy picks the host itself.
 *
 * What it keeps true: every new connection of the pool goes to the host last found to be the
 * primary (the first in the URL's order where `pg_is_in_recovery()` is false). A socket error on a
 * connection (one that cannot be made, or is reset) sets off a search over the hosts, repeated
 * every `searchEvery` until one is a primary; so after a failover the pool's next connections go
 * to the promoted standby, in the same process. Connections already open stay where they are
 * until they break (the old primary's die with it).
 *
 *   chosen ── socket error ──> searching ── a host answers pg_is_in_recovery() = false ──> chosen
 *                                     └── none does: search again after `searchEvery`
 *
 * A host a search never found to be a primary is never used, so bothy does not write to a standby;
 * an old primary that comes back as a primary (two primaries) is the operator's to prevent: the
 * first one in the URL wins.
 */
import * as Net from "node:net"
import type { ConnectionOptions } from "node:tls"
import { PgClient } from "@effect/sql-pg"
import { Duration, Effect, Option, Queue, Redacted, type Scope } from "effect"
import { SqlClient } from "effect/sql"
import { InvalidConfig } from "./BothyConfig.ts"

export interface HostPort {
  readonly host: string
  readonly port: number
}

export interface Hosts {
  readonly hosts: ReadonlyArray<HostPort>
  /** The URL with `host` alone in place of the host list (and no `target_session_attrs`). */
  readonly urlOf: (host: HostPort) => Redacted.Redacted
}

/** How often a search that found no primary is repeated. */
export const searchEvery = Duration.millis(250)

const hostList = /^(postgres(?:ql)?:\/\/(?:[^@/?#]*@)?)([^/?#]*)(.*)$/

const parseHost = (text: string): HostPort | undefined => {
  const m = /^(\[[^\]]+\]|[^:]+)(?::(\d+))?$/.exec(text)
  if (m === null) return undefined
  return { host: m[1]!.replace(/^\[|\]$/g, ""), port: m[2] === undefined ? 5432 : Number(m[2]) }
}

/**
 * The hosts of a URL that names more than one; `None` for a URL with one host (the driver's own
 * case). Fails on a `target_session_attrs` other than `read-write` or `primary`: bothy writes, so
 * it looks for the primary whatever the URL says, and a URL asking for a standby is a mistake.
 */
export const parse = (url: string): Effect.Effect<Option.Option<Hosts>, InvalidConfig> =>
  Effect.gen(function* () {
    const m = hostList.exec(url)
    if (m === null || !m[2]!.includes(",")) return Option.none()
    const invalid = (detail: string) => new InvalidConfig({ keys: ["DATABASE_URL"], detail: `DATABASE_URL ${detail}` })
    const [, prefix, list, rest] = m as unknown as [string, string, string, string]
    const hosts: Array<HostPort> = []
    for (const text of list.split(",")) {
      const host = parseHost(text)
      if (host === undefined) return yield* invalid(`names a host it cannot read: "${text}"`)
      hosts.push(host)
    }
    const query = new URLSearchParams(rest.includes("?") ? rest.slice(rest.indexOf("?") + 1) : "")
    const attrs = query.get("target_session_attrs")
    if (attrs !== null && attrs !== "read-write" && attrs !== "primary") {
      return yield* invalid(
        `asks for target_session_attrs=${attrs}; bothy writes, so it always looks for the primary (read-write or primary)`,
      )
    }
    const rewritten = rest.replace(/([?&])target_session_attrs=[^&#]*&?/, "$1").replace(/[?&]$/, "")
    const urlOf = (h: HostPort) =>
      Redacted.make(`${prefix}${h.host.includes(":") ? `[${h.host}]` : h.host}:${h.port}${rewritten}`)
    return Option.some({ hosts, urlOf })
  })

export interface Chooser {
  /** The host new connections go to now. */
  readonly current: () => HostPort
  /** The driver's `stream`: a socket to the current host; a failure sets off a search. */
  readonly stream: () => Net.Socket
  /** `ssl` with the server name following the current host (certificates name their own host). */
  readonly ssl: (ssl: ConnectionOptions | undefined) => ConnectionOptions | undefined
}

/** Whether the host at `url` is a primary; `false` when it cannot be reached. */
const isPrimary = (url: Redacted.Redacted, ssl: ConnectionOptions | undefined) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) => sql<{ standby: boolean }>`SELECT pg_is_in_recovery() AS standby`).pipe(
    Effect.provide(
      PgClient.layer({
        url,
        maxConnections: 1,
        connectTimeout: Duration.seconds(2),
        applicationName: "bothy",
        prepare: false,
        ...(ssl && { ssl }),
      }),
    ),
    Effect.map((rows) => rows[0]?.standby === false),
    Effect.timeoutOption(Duration.seconds(5)),
    Effect.map((found) => Option.getOrElse(found, () => false)),
    Effect.catch(() => Effect.succeed(false)),
  )

/** The first primary in the URL's order, if any answers now. */
export const findPrimary = (hosts: Hosts, ssl: ConnectionOptions | undefined) =>
  Effect.findFirst(hosts.hosts, (h) => isPrimary(hosts.urlOf(h), ssl))

/**
 * Starts choosing among `hosts` from `first` (a primary found at start); the searches run in a
 * fiber of the scope.
 */
export const make = (
  hosts: Hosts,
  first: HostPort,
  ssl: ConnectionOptions | undefined,
): Effect.Effect<Chooser, never, Scope.Scope> =>
  Effect.gen(function* () {
    let current = first
    const suspect = yield* Queue.sliding<void>(1)
    const search: Effect.Effect<void> = Effect.gen(function* () {
      const found = yield* findPrimary(hosts, ssl)
      if (Option.isNone(found)) return yield* Effect.sleep(searchEvery).pipe(Effect.andThen(search))
      if (found.value !== current) {
        yield* Effect.logWarning(
          `the primary is now ${found.value.host}:${found.value.port} (was ${current.host}:${current.port}); new connections go there`,
        )
      }
      current = found.value
    })
    yield* Queue.take(suspect).pipe(Effect.andThen(search), Effect.forever, Effect.forkScoped)
    return {
      current: () => current,
      stream: () => {
        const socket = Net.connect({ host: current.host, port: current.port, noDelay: true })
        socket.once("error", () => Queue.offerUnsafe(suspect, undefined))
        return socket
      },
      ssl: (options) =>
        options === undefined
          ? undefined
          : {
              ...options,
              get servername() {
                return Net.isIP(current.host) === 0 ? current.host : undefined
              },
            },
    } satisfies Chooser
  })
