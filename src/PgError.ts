/**
 * What PostgreSQL said about a failed statement. `SqlError` classifies errors by SQLSTATE class;
 * some conditions need the exact code (and, where PostgreSQL shares a code between conditions,
 * its message).
 */
import { Predicate } from "effect"
import type { SqlError } from "effect/sql/SqlError"

export interface PgFailure {
  readonly code: string | undefined
  readonly message: string
}

export const pgFailure = (error: SqlError): PgFailure => {
  const fields: unknown = error.reason.cause
  const code = Predicate.hasProperty(fields, "code") && Predicate.isString(fields.code) ? fields.code : undefined
  const message = fields instanceof Error ? fields.message : error.message
  return { code, message }
}

/** `23514` with this message: the row's partition key has no partition (there is no default one). */
export const isNoPartition = (error: SqlError) => {
  const { code, message } = pgFailure(error)
  return code === "23514" && message.includes("no partition of relation")
}
