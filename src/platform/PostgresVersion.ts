/**
 * The PostgreSQL majors bothy supports, and the check that refuses any other server at start.
 *
 * Keeps true: bothy never runs its migrations or its SQL on a server older than `minimumMajor`,
 * where they would fail later, one statement at a time, as untyped query errors. The worker, the
 * migrations and every CLI command check once, on their first connection, and stop with one line
 * naming the version found and the minimum.
 *
 * Why 15: the oldest major the tests run on (the log, consumer, job, webhook-order, push and
 * restore suites run on every major listed here). Nothing bothy runs needs more than 14
 * (`DETACH PARTITION ... CONCURRENTLY`, for retention), and those suites passed on 14.23, but an
 * embedded build of 14 cannot be pinned for every platform, so 14 would go untested.
 */
import { Effect, Schema } from "effect"
import { SqlClient } from "effect/sql"

/** The oldest major bothy runs on. */
export const minimumMajor = 15

/** The majors the tests run on (the newest is the embedded server's). */
export const supportedMajors = [15, 16, 17, 18] as const

export class PostgresVersionUnsupported extends Schema.TaggedError<PostgresVersionUnsupported>()(
  "PostgresVersionUnsupported",
  {
    /** The server's `server_version`, e.g. `13.23`. */
    found: Schema.String,
    minimum: Schema.Number,
  },
) {
  override get message() {
    return `PostgreSQL ${this.found} is older than bothy supports: it needs PostgreSQL ${this.minimum} or newer (supported: ${supportedMajors[0]} to ${supportedMajors.at(-1)})`
  }
}

export interface ServerVersion {
  /** `server_version_num`, e.g. 150012 for 15.12. */
  readonly num: number
  /** `server_version`, e.g. `15.12 (Debian 15.12-1)`. */
  readonly text: string
  readonly major: number
}

/** The server's version, as it reports it. */
export const read = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const [row] = yield* sql<{ num: number; text: string }>`
    SELECT current_setting('server_version_num')::int AS num, current_setting('server_version') AS text`
  const num = row?.num ?? 0
  return { num, text: row?.text ?? "unknown", major: Math.floor(num / 10000) } satisfies ServerVersion
})

/** `version` if bothy supports it; `PostgresVersionUnsupported` otherwise. */
export const judge = (version: ServerVersion, minimum: number = minimumMajor) =>
  version.major >= minimum
    ? Effect.succeed(version)
    : Effect.fail(new PostgresVersionUnsupported({ found: version.text, minimum }))

/** Reads the server's version and refuses one older than `minimum` (default: `minimumMajor`). */
export const check = (minimum: number = minimumMajor) =>
  Effect.flatMap(read, (version) => judge(version, minimum)).pipe(Effect.withSpan("PostgresVersion.check"))
