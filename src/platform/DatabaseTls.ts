/**
 * TLS to the database as libpq's URL parameters mean it, for the driver that does not read them all.
 * `@effect/sql-pg` reads `sslmode` only, and verifies every certificate against the system's CAs
 * whatever the mode; it ignores `sslrootcert`, `sslcert` and `sslkey`. So a managed service's URL
 * (`sslmode=verify-full&sslrootcert=/etc/ssl/rds-ca.pem`) would fail against its private CA, and
 * `sslmode=require` (encrypt, verify nothing) would fail against a self-signed server.
 *
 * What it keeps true: the modes keep libpq's meaning.
 * - `require`: encrypted; no certificate check, or the chain only (`verify-ca`) when `sslrootcert`
 *   is given, as libpq does.
 * - `verify-ca`: the chain is checked against `sslrootcert` (or the system's CAs), not the host.
 * - `verify-full`: the chain and the host name are checked, against `sslrootcert` if given
 *   (`sslrootcert=system`: the system's CAs).
 * - `sslcert`/`sslkey`: a client certificate for any of them.
 * - no `sslmode`, `disable`, `prefer`, `allow`: left to the driver (it tries TLS first for
 *   `prefer`/`allow` and then verifies).
 * A file that cannot be read stops the start with one line naming the parameter and the path.
 */
import { readFileSync } from "node:fs"
import type { ConnectionOptions } from "node:tls"
import { Effect, Schema } from "effect"

export class DatabaseTlsFileUnreadable extends Schema.TaggedError<DatabaseTlsFileUnreadable>()(
  "DatabaseTlsFileUnreadable",
  { variable: Schema.String, parameter: Schema.String, path: Schema.String, cause: Schema.String },
) {
  override get message() {
    return `${this.variable}: ${this.parameter}=${this.path} cannot be read: ${this.cause}`
  }
}

/** libpq's `sslmode=verify-ca`: the chain is checked, the host name is not. */
const anyHost = () => undefined

/**
 * The `ssl` options the URL's libpq parameters ask for; none where the driver's own reading of
 * `sslmode` already means what libpq does.
 */
export const fromUrl = (url: string, variable: string) =>
  Effect.gen(function* () {
    let params: URLSearchParams
    try {
      params = new URL(url).searchParams
    } catch {
      return undefined
    }
    const mode = params.get("sslmode")
    if (mode !== "require" && mode !== "verify-ca" && mode !== "verify-full") return undefined
    const read = (parameter: string) =>
      Effect.suspend(() => {
        const path = params.get(parameter)
        if (path === null || (parameter === "sslrootcert" && path === "system")) return Effect.undefined
        return Effect.try({
          try: () => readFileSync(path, "utf8"),
          catch: (e) =>
            new DatabaseTlsFileUnreadable({
              variable,
              parameter,
              path,
              cause: e instanceof Error ? e.message : String(e),
            }),
        })
      })
    const ca = yield* read("sslrootcert")
    const cert = yield* read("sslcert")
    const key = yield* read("sslkey")
    const client: ConnectionOptions = { ...(cert === undefined ? {} : { cert }), ...(key === undefined ? {} : { key }) }
    const rootGiven = params.get("sslrootcert") !== null
    if (mode === "require" && !rootGiven) return { ...client, rejectUnauthorized: false } satisfies ConnectionOptions
    const trusted = ca === undefined ? {} : { ca }
    if (mode === "verify-full") return { ...client, ...trusted } satisfies ConnectionOptions
    return { ...client, ...trusted, checkServerIdentity: anyHost } satisfies ConnectionOptions
  })
