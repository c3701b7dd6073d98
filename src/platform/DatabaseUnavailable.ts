/**
 * Why bothy cannot reach its database at start, as one line an operator can act on: which server
 * (its URL with the password redacted), the variable that named it, and the cause (nothing listens,
 * unknown host, authentication refused, unknown database, ...), never the password.
 */
import { Schema } from "effect"
import type { SqlError } from "effect/sql/SqlError"
import { pgFailure } from "./PgError.ts"

export class DatabaseUnavailable extends Schema.TaggedError<DatabaseUnavailable>()("DatabaseUnavailable", {
  /** The server, e.g. `postgres://bothy:***@db:5432/app`. */
  target: Schema.String,
  /** The setting that named the server, when one did. */
  variable: Schema.optional(Schema.String),
  cause: Schema.String,
}) {
  override get message() {
    const from = this.variable === undefined ? "" : ` (${this.variable})`
    return `cannot connect to ${this.target}${from}: ${this.cause}`
  }
}

/** The URL as it may be shown: its password replaced by `***`; `undefined` if it does not parse. */
export const redactedUrl = (url: string) => {
  try {
    const u = new URL(url)
    if (u.password !== "") u.password = "***"
    return u.toString()
  } catch {
    return undefined
  }
}

// What the socket errors mean for an operator; PostgreSQL's own messages (wrong password
// `28P01`, unknown database `3D000`, pg_hba refusal `28000`, ...) say it already and stay as they are.
const explained: Record<string, string> = {
  ECONNREFUSED: "nothing listens at that host and port",
  ENOTFOUND: "unknown host",
  EAI_AGAIN: "the host name could not be resolved for now",
  ETIMEDOUT: "no answer from that host",
  EHOSTUNREACH: "the host is unreachable",
  ENETUNREACH: "the network is unreachable",
}

// A certificate the client refused: Node's own message ends in advice about Node's flags, which
// is no use to an operator, so these say what to check in the URL instead.
const untrusted =
  "the server's certificate is not signed by a CA bothy trusts (the file in the URL's sslrootcert, else the system's CAs)"
const refusedCertificate: Record<string, string> = {
  UNABLE_TO_VERIFY_LEAF_SIGNATURE: untrusted,
  UNABLE_TO_GET_ISSUER_CERT: untrusted,
  UNABLE_TO_GET_ISSUER_CERT_LOCALLY: untrusted,
  SELF_SIGNED_CERT_IN_CHAIN: untrusted,
  DEPTH_ZERO_SELF_SIGNED_CERT: `${untrusted}; it is self-signed`,
  CERT_HAS_EXPIRED: "the server's certificate has expired",
  CERT_NOT_YET_VALID: "the server's certificate is not valid yet",
  ERR_TLS_CERT_ALTNAME_INVALID:
    "the server's certificate does not name the host in the URL (sslmode=verify-full checks it; verify-ca does not)",
}

/** Names the cause of a failed first connection. */
export const describe = (error: SqlError, target: string, variable?: string) => {
  const { code, message } = pgFailure(error)
  const certificate = code === undefined ? undefined : refusedCertificate[code]
  const explanation = code === undefined ? undefined : explained[code]
  return new DatabaseUnavailable({
    target,
    ...(variable === undefined ? {} : { variable }),
    cause:
      certificate !== undefined
        ? `TLS refused (${code}): ${certificate}`
        : explanation === undefined
          ? message
          : `${message}: ${explanation}`,
  })
}
